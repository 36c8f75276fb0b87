"""Bad command-line input to every command that takes a path, a key, a shard or a scope:
each one exits 2 with one paragraph naming the problem, never a traceback.

The commands run in-process through the console entry point (``fasttrack.cli.main``), so an
exception that escapes it fails the test with its traceback; a few run as real processes too.
No engine is started: ``validate`` gets inputs that are refused before any engine would be,
and attaches to a closed port should one ever slip through.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from security_testlib import Keys, force_sign, nested_json, packed, rewrite_manifest, variant
from tar_testlib import hostile_tgz, reg

from fasttrack import ROOT, limits
from fasttrack.cli import main

pytestmark = pytest.mark.timeout(120)


@dataclass
class Inputs:
    """Hostile files, made once per module."""

    root: Path
    missing: Path
    empty: Path
    random: Path
    fifo: Path
    folder: Path
    nested_bundle: Path
    nested_tgz: Path
    bomb_tgz: Path
    traversal_tgz: Path
    garbage_tgz: Path
    not_a_bundle: Path
    laughs: Path
    deep_yaml: Path
    huge_yaml: Path
    python_tag: Path
    markup_scope: Path
    rsa_pub: Path
    out_is_file: Path


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory, base_bundle: Path, keys: Keys) -> Inputs:
    root = tmp_path_factory.mktemp("bad-inputs")
    empty = root / "empty"
    empty.write_bytes(b"")
    rnd = root / "random.bin"
    rnd.write_bytes(bytes((i * 131 + 7) % 256 for i in range(4096)) + b"\x1b[31m\x07")
    fifo = root / "fifo"
    os.mkfifo(fifo)
    folder = root / "folder"
    folder.mkdir()
    nested = variant(base_bundle, root / "nested-bundle")
    rewrite_manifest(nested, raw=nested_json(200_000).encode())
    force_sign(nested, keys.trusted, predicate={})
    zeros = limits.BUNDLE_RATIO_FLOOR + 8 * 1024 * 1024
    laughs = root / "laughs.yaml"
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    laughs.write_text("\n".join(lines) + "\n")
    assert len(laughs.read_bytes()) < 600
    deep = root / "deep.yaml"
    deep.write_text("name: " + "[" * 5000 + "]" * 5000 + "\n")
    huge = root / "huge.yaml"
    huge.write_text("name: x\npad: '" + "y" * (limits.YAML_MAX_BYTES + 10) + "'\n")
    tag = root / "tag.yaml"
    tag.write_text("name: !!python/object/apply:os.system ['echo owned > /tmp/fasttrack-owned']\n")
    import shutil

    shutil.copytree(ROOT / "suites" / "demo-llama", root / "markup")
    markup = root / "markup" / "scope.yaml"
    lines = markup.read_text().splitlines()
    lines = [
        ('title: "[/x] evil [link=https://evil.example]y \\e[2J"' if ln.startswith("title:") else ln) for ln in lines
    ]
    markup.write_text("\n".join(lines) + "\n")
    rsa_pub = root / "rsa.pub"
    rsa_pub.write_bytes(
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )
    out_is_file = root / "out-file"
    out_is_file.write_text("x")
    return Inputs(
        root=root,
        missing=root / "missing",
        empty=empty,
        random=rnd,
        fifo=fifo,
        folder=folder,
        nested_bundle=nested,
        nested_tgz=packed(nested, root / "nested.tar.gz"),
        bomb_tgz=hostile_tgz(root / "bomb.tar.gz", [reg("manifest.json", b"{}"), reg("z", b"\0" * zeros)]),
        traversal_tgz=hostile_tgz(root / "trav.tar.gz", [reg("../../escaped-by-cli", b"x")]),
        garbage_tgz=rnd,
        not_a_bundle=folder,
        laughs=laughs,
        deep_yaml=deep,
        huge_yaml=huge,
        python_tag=tag,
        markup_scope=markup,
        rsa_pub=rsa_pub,
        out_is_file=out_is_file,
    )


def run(argv: list[str | Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """Run ``fasttrack ARGV`` in-process: (exit code, stdout + stderr). An escaping exception fails."""
    monkeypatch.delenv("FASTTRACK_TRUST_DIR", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(ROOT)
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out = capsys.readouterr()
    return code, out.out + out.err


def one_paragraph(code: int, text: str, argv: list[str | Path]) -> None:
    """Exit 2; one ``error:`` paragraph (or click's usage block: usage, hint, one ``Error:`` line); no
    traceback; no raw control bytes from a file."""
    assert code == 2, (argv, code, text[-2000:])
    assert "Traceback" not in text, (argv, text)
    body = text.strip()
    if body.startswith("Usage:"):
        assert body.count("Error:") == 1 and body.splitlines()[-1].startswith("Error:"), (argv, text)
    else:
        assert body.lower().startswith("error") and "\n\n" not in body, (argv, text)
    assert "\x1b[31m" not in body and "\x07" not in body, (argv, "raw bytes from a file reached the terminal")


# --------------------------------------------------------------------------- the corpus

Case = Callable[[Inputs, Keys, Path], list[str | Path]]

SHARDS = ["1/99999999999999999999", "1 /4", "\uff11/\uff14", "0/4", "5/4", "1/0", "a/b", "", "1/4/5", "1/5000"]
SCOPES = ["missing", "empty", "random", "fifo", "folder", "laughs", "deep_yaml", "huge_yaml", "python_tag"]
KEYS_BAD = ["missing", "empty", "random", "fifo", "folder", "dev_zero", "rsa_pub", "private"]
BUNDLES_BAD = ["missing", "empty", "garbage_tgz", "fifo", "not_a_bundle", "traversal_tgz", "bomb_tgz"]


def path_of(bad: Inputs, keys: Keys, name: str) -> Path:
    if name == "dev_zero":
        return Path("/dev/zero")
    if name == "private":
        return keys.trusted_priv
    return getattr(bad, name)


NO_ENGINE = ["--baseline-url", "http://127.0.0.1:9", "--candidate-url", "http://127.0.0.1:9"]

CASES: dict[str, Case] = {}
# every bad value through the cheapest command that takes it, and a few through each other command
for s in SHARDS:
    CASES[f"plan --shard {s!r}"] = lambda b, k, t, s=s: [
        "plan",
        "--model",
        "demo-llama",
        "--shard",
        s,
        "--no-arg-check",
    ]
for s in ("1/99999999999999999999", "1 /4"):
    CASES[f"validate --shard {s!r}"] = lambda b, k, t, s=s: [
        "validate", "--model", "demo-llama", "--shard", s, "--out", t / "run", *NO_ENGINE,
    ]  # fmt: skip
for name in SCOPES:
    CASES[f"plan --model {name}"] = lambda b, k, t, n=name: ["plan", "--model", path_of(b, k, n), "--no-arg-check"]
for name in ("laughs", "deep_yaml", "random"):
    CASES[f"validate --model {name}"] = lambda b, k, t, n=name: [
        "validate", "--model", path_of(b, k, n), "--out", t / "run", *NO_ENGINE,
    ]  # fmt: skip
    CASES[f"doctor --model {name}"] = lambda b, k, t, n=name: ["doctor", "--model", path_of(b, k, n), "--no-arg-check"]
    CASES[f"isolation --model {name}"] = lambda b, k, t, n=name: [
        "isolation", "--model", path_of(b, k, n), "--repo", ROOT, "--base", "HEAD", "--head", "HEAD",
    ]  # fmt: skip
for name in KEYS_BAD:
    CASES[f"verify --key {name}"] = lambda b, k, t, n=name: ["verify", b.nested_bundle, "--key", path_of(b, k, n)]
for name in ("dev_zero", "private", "random"):
    CASES[f"report --key {name}"] = lambda b, k, t, n=name: [
        "report", b.nested_bundle, "-o", t / "r.html", "--key", path_of(b, k, n),
    ]  # fmt: skip
    CASES[f"dashboard build --key {name}"] = lambda b, k, t, n=name: [
        "dashboard", "build", "--bundles", b.folder, "-o", t / "site", "--key", path_of(b, k, n),
    ]  # fmt: skip
    CASES[f"dashboard serve --key {name}"] = lambda b, k, t, n=name: [
        "dashboard", "serve", "--bundles", b.folder, "-o", t / "site", "--port", "0", "--key", path_of(b, k, n),
    ]  # fmt: skip
    CASES[f"merge --key {name}"] = lambda b, k, t, n=name: [
        "merge",
        b.nested_bundle,
        "-o",
        t / "m",
        "--key",
        path_of(b, k, n),
    ]
    CASES[f"reproduce --key {name}"] = lambda b, k, t, n=name: [
        "reproduce", b.nested_bundle, "--checks", "perf", "--out", t / "rr", "--key", path_of(b, k, n),
    ]  # fmt: skip
    CASES[f"pr publish --key {name}"] = lambda b, k, t, n=name: [
        "pr", "publish", b.nested_tgz, "--repo", "o/r", "--pr", "1", "--dry-run", "--pr-head", "a" * 40,
        "--key", path_of(b, k, n),
    ]  # fmt: skip
for name in [n for n in KEYS_BAD if n != "private"] + ["pub_as_private"]:

    def key(b: Inputs, k: Keys, n: str = name) -> Path:
        return k.trusted_pub if n == "pub_as_private" else path_of(b, k, n)

    CASES[f"sign --key {name}"] = lambda b, k, t, key=key: ["sign", b.nested_bundle, "--key", key(b, k)]
    if name in ("dev_zero", "pub_as_private"):
        CASES[f"merge --sign-key {name}"] = lambda b, k, t, key=key: [
            "merge", b.nested_bundle, "-o", t / "m", "--sign-key", key(b, k),
        ]  # fmt: skip
        CASES[f"validate --sign-key {name}"] = lambda b, k, t, key=key: [
            "validate", "--model", "demo-llama", "--out", t / "run", "--sign-key", key(b, k), *NO_ENGINE,
        ]  # fmt: skip
for name in BUNDLES_BAD + ["nested_bundle", "nested_tgz"]:
    CASES[f"merge {name}"] = lambda b, k, t, n=name: ["merge", path_of(b, k, n), "-o", t / "m"]
for name in ("missing", "bomb_tgz", "nested_tgz"):
    CASES[f"reproduce {name}"] = lambda b, k, t, n=name: [
        "reproduce", path_of(b, k, n), "--checks", "perf", "--out", t / "rr", "--key", k.trusted_pub,
    ]  # fmt: skip
    CASES[f"sign {name}"] = lambda b, k, t, n=name: ["sign", path_of(b, k, n), "--key", k.trusted_priv]
for name in ["missing", "fifo"]:
    CASES[f"verify {name}"] = lambda b, k, t, n=name: ["verify", path_of(b, k, n), "--key", k.trusted_pub]
    CASES[f"report {name}"] = lambda b, k, t, n=name: [
        "report",
        path_of(b, k, n),
        "-o",
        t / "r.html",
        "--key",
        k.trusted_pub,
    ]
CASES.update(
    {
        "trust dir missing": lambda b, k, t: ["verify", b.nested_bundle, "--trust", b.missing],
        "trust dir is a file": lambda b, k, t: ["verify", b.nested_bundle, "--trust", b.random],
        "trust dir empty": lambda b, k, t: ["verify", b.nested_bundle, "--trust", b.folder],
        "keys show random": lambda b, k, t: ["keys", "show", b.random],
        "keys show dev zero": lambda b, k, t: ["keys", "show", "/dev/zero"],
        "keys generate into a file": lambda b, k, t: ["keys", "generate", "-o", b.out_is_file, "--name", "x"],
        "keys generate over a key": lambda b, k, t: ["keys", "generate", "-o", k.trusted_priv.parent, "--name", "ci"],
        "keys generate odd name": lambda b, k, t: ["keys", "generate", "-o", t / "k", "--name", "../x"],
        "report -o into a file": lambda b, k, t: ["report", b.nested_bundle, "-o", b.out_is_file / "r.html"],
        "report --comment into a folder": lambda b, k, t: [
            "report",
            b.nested_bundle,
            "-o",
            t / "r.html",
            "--comment",
            b.folder,
        ],
        "dashboard build --bundles missing": lambda b, k, t: [
            "dashboard",
            "build",
            "--bundles",
            b.missing,
            "-o",
            t / "s",
        ],
        "dashboard build --bundles a file": lambda b, k, t: [
            "dashboard",
            "build",
            "--bundles",
            b.random,
            "-o",
            t / "s",
        ],
        "dashboard build into its bundles": lambda b, k, t: [
            "dashboard",
            "build",
            "--bundles",
            b.folder,
            "-o",
            b.folder.parent,
        ],
        "dashboard build -o a file": lambda b, k, t: ["dashboard", "build", "--bundles", b.folder, "-o", b.out_is_file],
        "dashboard build --cache a folder": lambda b, k, t: [
            "dashboard",
            "build",
            "--bundles",
            b.folder,
            "-o",
            t / "s",
            "--cache",
            b.folder,
        ],  # fmt: skip
        "dashboard serve --bundles missing": lambda b, k, t: [
            "dashboard",
            "serve",
            "--bundles",
            b.missing,
            "--port",
            "0",
        ],
        "validate --eval-data missing": lambda b, k, t: [
            "validate",
            "--model",
            "demo-llama",
            "--out",
            t / "run",
            "--eval-data",
            f"x={b.missing}",
            *NO_ENGINE,
        ],  # fmt: skip
        "validate --out a file": lambda b, k, t: [
            "validate",
            "--model",
            "demo-llama",
            "--out",
            b.out_is_file,
            *NO_ENGINE,
        ],
        "validate --repo missing": lambda b, k, t: [
            "validate",
            "--model",
            "demo-llama",
            "--out",
            t / "run",
            "--repo",
            b.missing,
            "--base",
            "a",
            "--head",
            "b",
            *NO_ENGINE,
        ],  # fmt: skip
        "isolation --repo a file": lambda b, k, t: [
            "isolation",
            "--model",
            "demo-llama",
            "--repo",
            b.random,
            "--base",
            "HEAD",
            "--head",
            "HEAD",
        ],  # fmt: skip
        "kernels --model laughs": lambda b, k, t: ["kernels", "--model", b.laughs, "--out", t / "k"],
        "kernels --suite missing": lambda b, k, t: [
            "kernels",
            "--model",
            "demo-llama",
            "--suite",
            b.missing,
            "--out",
            t / "k",
        ],
        "kernels --out a file": lambda b, k, t: ["kernels", "--model", "demo-llama", "--out", b.out_is_file],
        "verify --min-signatures 0": lambda b, k, t: [
            "verify",
            b.nested_bundle,
            "--key",
            k.trusted_pub,
            "--min-signatures",
            "0",
        ],
        "reproduce no checks": lambda b, k, t: ["reproduce", b.nested_bundle, "--checks", ",", "--key", k.trusted_pub],
    }
)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_paragraph_and_exit_2(
    case: str,
    bad: Inputs,
    keys: Keys,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv = CASES[case](bad, keys, tmp_path)
    code, text = run(argv, capsys, monkeypatch)
    one_paragraph(code, text, argv)
    assert not (bad.root.parent / "escaped-by-cli").exists()
    assert not Path("/tmp/fasttrack-owned").exists()


def test_the_scope_cases_name_the_limit(
    bad: Inputs, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for scope, words in ((bad.laughs, "aliases"), (bad.deep_yaml, "deep"), (bad.huge_yaml, "limit")):
        code, text = run(["plan", "--model", scope, "--no-arg-check"], capsys, monkeypatch)
        one_paragraph(code, text, [scope])
        assert words in text and str(scope) in text, text


def test_markup_in_a_scope_is_printed_as_text(
    bad: Inputs, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a valid scope whose title is console markup: refused in one paragraph, never rendered, never a traceback
    code, text = run(["plan", "--model", bad.markup_scope, "--no-arg-check"], capsys, monkeypatch)
    one_paragraph(code, text, [bad.markup_scope])
    assert "\x1b[2J" not in text


@pytest.mark.parametrize("name", ["nested_bundle", "nested_tgz", "empty", "not_a_bundle", "bomb_tgz", "traversal_tgz"])
def test_a_hostile_bundle_is_reported_not_crashed_on(
    name: str, bad: Inputs, keys: Keys, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a bundle that fails verification is a result, not a usage error: verify exits 1 naming the
    # failed item; report writes a page marked NOT verified (exit 0; 1 with --require-verified)
    b = path_of(bad, keys, name)
    # a --pr-head that is not a SHA is a usage error (exit 2) before the bundle is read; its raw bytes are quoted,
    # never echoed
    code, text = run(["verify", b, "--key", keys.trusted_pub, "--pr-head", "\x1b[2J"], capsys, monkeypatch)
    assert code == 2 and "Traceback" not in text and "is not a commit SHA" in text, text
    assert "\x1b[2J" not in text
    code, text = run(["verify", b, "--key", keys.trusted_pub, "--pr-head", "1234567"], capsys, monkeypatch)
    assert code == 1 and "Traceback" not in text and "NOT verified" in text, text
    if name.startswith("nested"):
        assert "more than 64 deep" in text
    out = bad.root / f"{name}.html"
    code, text = run(["report", b, "-o", out, "--key", keys.trusted_pub], capsys, monkeypatch)
    assert code == 0 and "NOT verified" in text and "Traceback" not in text and out.is_file(), text
    code, text = run(["report", b, "-o", out, "--key", keys.trusted_pub, "--require-verified"], capsys, monkeypatch)
    assert code == 1 and "Traceback" not in text


def test_the_console_script_agrees(bad: Inputs, keys: Keys) -> None:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("FASTTRACK_TRUST_DIR", None)
    for argv in (
        ["plan", "--model", str(bad.laughs), "--no-arg-check"],
        ["verify", str(bad.nested_bundle), "--key", "/dev/zero"],
        ["merge", str(bad.nested_tgz), "-o", str(bad.root / "merged")],
    ):
        res = subprocess.run(
            [sys.executable, "-m", "fasttrack", *argv], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
        )
        one_paragraph(res.returncode, res.stdout + res.stderr, argv)  # type: ignore[arg-type]
