"""fasttrack and the demo plugin from their wheels, as GPU hosts and the evaluation image install them.

A non-editable install has no repository around it: the suites, the demo model's builder, the
report templates and the schemas must come with the package (``fasttrack/_shipped``, setup.py).
The wheels are built from a copy of the files the build reads, installed with ``pip install
--no-deps`` into a fresh virtual environment whose third-party packages are the test venv's (a
``.pth`` line naming a folder of links to them, without fasttrack, the plugin and their editable
finders), and run from outside the repository: ``plan``, ``doctor``, the demo model's build and
the smoke tier of ``validate`` attached to the session's engines: the baseline, the candidate and stock's eager
build (the scope's reference variant, ``--reference-url``), so the run starts no engine.

On the H200 (before the wheel shipped its data) ``--model demo-llama`` said ``no suite named
'demo-llama'. Available suites: (none)``, and the scope's path gave ``model.local_builder
'examples/demo_model/build.py' does not exist under .../site-packages``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from demo_engines import require_demo_target

from fasttrack import ROOT
from fasttrack.bundle import open_bundle

#: What the builds read: fasttrack's (pyproject.toml, setup.py) and the plugin's.
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "fasttrack", "suites", "templates", "schemas")
#: Repository folders the wheel carries under fasttrack/_shipped/, in the same layout.
SHIPPED = ("suites", "templates", "schemas", "examples/demo_model")
_JUNK = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")


@dataclass(frozen=True)
class Wheels:
    fasttrack: Path
    plugin: Path


def _build(src: Path, out: Path) -> Path:
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Wheels:
    """Both wheels, built from a copy of what the builds read (no build/ or egg-info of a checkout gets in)."""
    src = tmp_path_factory.mktemp("wheel-src") / "fasttrack"
    src.mkdir()
    for name in BUILD_INPUTS:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=_JUNK)
        else:
            shutil.copy2(p, src / name)
    shutil.copytree(ROOT / "examples" / "demo_model", src / "examples" / "demo_model", ignore=_JUNK)
    plugin_src = tmp_path_factory.mktemp("plugin-src") / "fasttrack-demo-plugin"
    shutil.copytree(ROOT / "examples" / "demo_plugin", plugin_src, ignore=_JUNK)
    out = tmp_path_factory.mktemp("wheels")
    ft = _build(src, out / "fasttrack")
    plugin = _build(plugin_src, out / "plugin")
    return Wheels(ft, plugin)


def _repo_files(folder: str) -> set[str]:
    base = ROOT / folder
    return {
        f"{folder}/{p.relative_to(base).as_posix()}"
        for p in base.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def test_the_wheels_ship_the_suites_and_what_the_scopes_reference(wheels: Wheels) -> None:
    names = set(zipfile.ZipFile(wheels.fasttrack).namelist())
    shipped = {n.removeprefix("fasttrack/_shipped/") for n in names if n.startswith("fasttrack/_shipped/")}
    for folder in SHIPPED:
        missing = sorted(_repo_files(folder) - shipped)
        assert not missing, f"{folder}: not in the wheel: {missing[:10]}"
    assert "suites/demo-llama/scope.yaml" in shipped and "examples/demo_model/weights.safetensors" in shipped
    assert not [n for n in names if n.endswith(".pyc") or "__pycache__" in n]
    assert not [n for n in shipped if n.split("/")[0] not in {"suites", "templates", "schemas", "examples"}]
    assert not [n for n in shipped if n.startswith("examples/") and not n.startswith("examples/demo_model/")]
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "fasttrack").rglob("*.py")}
    assert not sorted(modules - names), "modules missing from the wheel (a folder without __init__.py too)"
    plugin = zipfile.ZipFile(wheels.plugin)
    pnames = plugin.namelist()
    assert "fasttrack_demo_plugin/csrc/fused_decode.cpp" in pnames
    eps = next(n for n in pnames if n.endswith("entry_points.txt"))
    assert "fasttrack_demo = fasttrack_demo_plugin:register" in plugin.read(eps).decode()


# --------------------------------------------------------------------------- installed, outside the repository


@dataclass(frozen=True)
class WheelVenv:
    root: Path
    python: Path
    env: dict[str, str]
    cwd: Path

    def run(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.root / "bin" / "fasttrack"), *args],
            capture_output=True,
            text=True,
            cwd=self.cwd,
            env=self.env,
            timeout=timeout,
        )


def _third_party(farm: Path) -> Path:
    """A folder of links to this venv's site-packages, without fasttrack, the demo plugin and their editable
    installs (their finders run from .pth files, which a folder on sys.path does not execute anyway)."""
    site = Path(sysconfig.get_paths()["purelib"])
    farm.mkdir()
    for entry in site.iterdir():
        n = entry.name
        if n.startswith(("fasttrack", "__editable__", "_fasttrack")) or n.endswith(".pth"):
            continue
        (farm / n).symlink_to(entry)
    return farm


def _clean_env() -> dict[str, str]:
    """This environment without what points Python at the checkout or at the test venv."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def make_venv(wheels: list[Path], root: Path, cwd: Path) -> WheelVenv:
    """A fresh venv at ``root`` with ``wheels`` installed (no dependencies) and this venv's third-party packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    res = subprocess.run(  # with the checkout on PYTHONPATH, pip would take fasttrack as installed already
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q"]
        + [str(w) for w in wheels],
        capture_output=True,
        text=True,
        timeout=600,
        env=_clean_env(),
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "already installed" not in res.stdout + res.stderr, res.stdout + res.stderr
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
            env=_clean_env(),
        ).stdout.strip()
    )
    (site / "zz-third-party.pth").write_text(str(_third_party(root.parent / "third-party")) + "\n")
    env = _clean_env()
    env.update(PATH=f"{root / 'bin'}{os.pathsep}{env['PATH']}", COLUMNS="200", NO_COLOR="1", PYTHONUNBUFFERED="1")
    return WheelVenv(root, python, env, cwd)


@pytest.fixture(scope="session")
def wheel_venv(wheels: Wheels, tmp_path_factory: pytest.TempPathFactory) -> WheelVenv:
    root = tmp_path_factory.mktemp("wheel-venv") / "venv"
    return make_venv([wheels.fasttrack, wheels.plugin], root, tmp_path_factory.mktemp("elsewhere"))


_WHERE = """
import importlib.metadata as md, json, sys
import fasttrack, fasttrack_demo_plugin
from fasttrack_demo_plugin import ops
eps = [ep.value for ep in md.entry_points(group="vllm.general_plugins")]
print(json.dumps({"fasttrack": fasttrack.__file__, "root": str(fasttrack.ROOT), "checkout": fasttrack.SOURCE_CHECKOUT,
                  "plugin": fasttrack_demo_plugin.__file__, "native": str(ops.NATIVE_SOURCE),
                  "native_exists": ops.NATIVE_SOURCE.is_file(), "eps": eps,
                  "finders": [type(f).__module__ for f in sys.meta_path]}))
"""


@pytest.mark.e2e
def test_fasttrack_from_its_wheel_plans_checks_and_validates_outside_the_repo(
    wheel_venv: WheelVenv, reference_engines, demo_model, tmp_path: Path
) -> None:
    require_demo_target(demo_model)
    v = wheel_venv
    where = subprocess.run([str(v.python), "-c", _WHERE], capture_output=True, text=True, cwd=v.cwd, env=v.env)
    assert where.returncode == 0, where.stderr
    info = json.loads(where.stdout)
    assert info["fasttrack"].startswith(str(v.root)) and info["plugin"].startswith(str(v.root)), info
    assert info["checkout"] is False and info["root"].endswith("fasttrack/_shipped"), info
    assert info["native_exists"] and info["native"].startswith(str(v.root)), info
    assert info["eps"].count("fasttrack_demo_plugin:register") == 1, info["eps"]
    assert not [f for f in info["finders"] if "editable" in f], info["finders"]

    plan = v.run("plan", "--model", "demo-llama")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "10 config points in 1 engine groups" in plan.stdout and "every required item" in plan.stdout

    doctor = v.run("doctor", "--model", "demo-llama", "--no-arg-check")
    assert "Traceback" not in doctor.stdout + doctor.stderr, doctor.stderr
    assert "ok      hardware: scope asks for: a CPU host" in doctor.stdout, doctor.stdout
    assert "problem model" not in doctor.stdout and doctor.returncode == 0, doctor.stdout

    # the scope's model builder (../../examples/demo_model/build.py from the suite's folder) runs from the wheel
    build = subprocess.run(
        [
            str(v.python),
            "-c",
            "from fasttrack.host.models import resolve_model; from fasttrack.scope import load_scope; "
            "s = load_scope('demo-llama'); print(resolve_model(s.scope, base_dir=s.base_dir, log=print).model)",
        ],
        capture_output=True,
        text=True,
        cwd=v.cwd,
        env={**v.env, "FASTTRACK_CACHE": str(tmp_path / "cache")},
        timeout=600,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    assert (tmp_path / "cache" / "models" / "demo-llama" / "fasttrack-model.json").is_file(), build.stdout

    # the smoke tier, attached to the session's engines: the suite's kernel suites and prompts, the calibrated
    # equivalence judgement (stock's eager build attached too), the report
    engine_pair = reference_engines
    candidate = engine_pair.candidate()
    out = tmp_path / "run"
    res = v.run(
        "validate",
        "--model",
        "demo-llama",
        "--tier",
        "smoke",
        "--checks",
        "kernels,equivalence",
        "--baseline-url",
        engine_pair.baseline.api_url,
        "--candidate-url",
        candidate.api_url,
        "--reference-url",
        reference_engines.reference_url,
        "--out",
        str(out),
        timeout=1500,
    )
    text = res.stdout + res.stderr
    assert "Traceback" not in text, text[-4000:]
    manifest = json.loads((out / "bundle" / "manifest.json").read_text())
    checks = manifest["checks"]
    assert checks["kernels"]["verdict"] == "pass", checks["kernels"]
    assert checks["equivalence"]["verdict"] == "pass", checks["equivalence"]
    # the checks left out with --checks stay required: the bundle is incomplete, and validate exits 1
    assert manifest["verdict"] == "incomplete" and res.returncode == 1, text[-3000:]
    # the suite's prompt set and the shared passages, read from the wheel and named as in the repository
    datasets = manifest["provenance"]["datasets"]
    assert {"suites/demo-llama/prompts/prompts.jsonl", "suites/common/prompts/passages.jsonl"} <= set(datasets)
    assert manifest["provenance"]["fasttrack_commit"] is None  # a wheel has no commit of its own
    # the session's engines, every one attached (stock's eager build, the reference variant, too): no engine started
    engines = manifest["provenance"]["engines"]
    assert [e["mode"] for e in engines] == ["attached"] * 3, engines
    urls = [engine_pair.baseline.base_url, candidate.base_url, reference_engines.reference.base_url]
    assert sorted(str(e["url"]) for e in engines) == sorted(urls), engines
    # the calibrated rule judged every point against what the attached eager build measured
    with open_bundle(out / "bundle") as view:
        points = view.rows("equivalence", "equivalence_points")
    assert points and all("vs stock eager" in str(r.get("calibration")) for r in points), points
    html = (out / "report.html").read_text()
    assert "demo-llama" in html and "Content-Security-Policy" in html


# --------------------------------------------------------------------------- a check and a feature from outside

_LOADED = """
import json, sys
from fasttrack.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""
"""Run ``fasttrack ARGS`` and print the modules it loaded."""

#: The check order with the toy plugin's check (after features, before coverage).
TOY_ORDER = ["isolation", "kernels", "equivalence", "features", "toy", "coverage", "evals", "perf"]


@pytest.fixture(scope="session")
def toy_venv(wheels: Wheels, tmp_path_factory: pytest.TempPathFactory) -> WheelVenv:
    """fasttrack's and the demo plugin's wheels, and the toy plugin's (tests/checks/toy_plugin): a package that
    declares a check and a serving feature in one module, named in its ``fasttrack`` entry-point group."""
    src = tmp_path_factory.mktemp("toy-src") / "fasttrack-toy"
    shutil.copytree(ROOT / "tests" / "checks" / "toy_plugin", src, ignore=_JUNK)
    toy = _build(src, tmp_path_factory.mktemp("toy-wheel"))
    eps = next(n for n in zipfile.ZipFile(toy).namelist() if n.endswith("entry_points.txt"))
    assert zipfile.ZipFile(toy).read(eps).decode().split() == ["[fasttrack]", "toy", "=", "fasttrack_toy"]
    root = tmp_path_factory.mktemp("toy-venv") / "venv"
    return make_venv([wheels.fasttrack, wheels.plugin, toy], root, tmp_path_factory.mktemp("elsewhere"))


def _toy_scope(where: Path) -> Path:
    """The demo scope with the toy feature as the smoke tier's only feature and a ``gates.toy`` section, in a
    suites folder next to a link to the repository's examples (the scope's model builder is found as from the
    suite's own folder)."""
    d = where / "suites" / "demo-toy"
    d.mkdir(parents=True)
    for p in (ROOT / "suites" / "demo-llama").iterdir():
        if p.name != "scope.yaml":
            (d / p.name).symlink_to(p)
    (where / "examples").symlink_to(ROOT / "examples")
    text = (ROOT / "suites" / "demo-llama" / "scope.yaml").read_text()
    old_features = (
        "    features: [structured_output, temperature_sampling, full_context, seeded_sampling, stop_sequences, "
        "max_tokens, n_best,\n               logprobs]\n"
    )
    for old, new in (
        (old_features, "    features: [toy_echo]\n"),
        ("logprobs,\n           speculative_acceptance]", "logprobs,\n           speculative_acceptance, toy_echo]"),
        ("  coverage: {min_optimized_decode_fraction: 0.9}\n", "  coverage: {min_optimized_decode_fraction: 0.9}\n"
         "  toy: {min_score: 0.6}\n"),
    ):  # fmt: skip
        assert old in text, old
        text = text.replace(old, new)
    (d / "scope.yaml").write_text(text)
    return d / "scope.yaml"


@pytest.mark.e2e
def test_a_check_and_a_feature_from_an_outside_package_run_end_to_end(
    toy_venv: WheelVenv, engine_pair, demo_model, tmp_path: Path
) -> None:
    """With the toy package installed next to fasttrack's wheel (no file of fasttrack changed): ``plan`` orders
    and prices its check and feature, ``validate`` runs them on the demo (attached to the session's engines),
    the bundle records them, ``verify`` accepts it and the report shows them."""
    require_demo_target(demo_model)
    v = toy_venv
    scope = _toy_scope(tmp_path / "tree")
    plan = v.run("plan", "--model", str(scope), "--json", "--no-arg-check")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    doc = json.loads(plan.stdout)
    assert doc["check_order"] == TOY_ORDER and doc["features"] == ["toy_echo"]
    costs = doc["estimate"]["checks"]
    assert costs["toy"]["wall_hours"] == round(30 / 3600, 4)  # the check's own cost: one kernel suite, 30 s
    assert costs["features"]["decode_tokens"] == 2 * 4  # the feature's decode steps, both sides of one group
    planned = {c["name"]: c for c in doc["checks_planned"]}
    assert planned["toy"]["gate"] == "gates.toy" and planned["features"]["exercises"] == ["toy_echo"]

    keys = v.run("keys", "generate", "-o", str(tmp_path / "keys"), "--name", "toy")
    assert keys.returncode == 0, keys.stdout + keys.stderr
    candidate = engine_pair.candidate()
    out = tmp_path / "run"
    res = v.run(
        "validate", "--model", str(scope), "--tier", "smoke", "--checks", "features,toy",
        "--baseline-url", engine_pair.baseline.api_url, "--candidate-url", candidate.api_url,
        "--out", str(out), "--sign-key", str(tmp_path / "keys" / "toy"), timeout=1500,
    )  # fmt: skip
    text = res.stdout + res.stderr
    assert "Traceback" not in text, text[-4000:]
    manifest = json.loads((out / "bundle" / "manifest.json").read_text())
    said = {k: (c["verdict"], c["reason"]) for k, c in manifest["checks"].items()}
    assert manifest["plan"]["plan"]["check_order"] == TOY_ORDER, said
    toy = manifest["checks"]["toy"]
    assert toy["verdict"] == "pass" and toy["title"] == "Toy check", toy
    features = manifest["checks"]["features"]
    assert features["summary"]["per_feature"]["toy_echo"]["verdict"] == "pass", said
    assert features["verdict"] == "pass", said
    assert manifest["verdict"] == "incomplete" and res.returncode == 1  # the checks left out stay required

    bundle = next(out.glob("*.tar.gz"), out / "bundle")
    ver = v.run("verify", str(bundle), "--key", str(tmp_path / "keys" / "toy.pub"), "--json")
    assert ver.returncode == 0, ver.stdout + ver.stderr
    assert json.loads(ver.stdout)["verified"] is True
    # verify stays light with the plugin installed: parsing the scope it re-judges by imports the installed plugins
    # (their gate models; a scope may require their checks), and neither it nor the toy loads vLLM or torch
    probe = subprocess.run(
        [str(v.python), "-c", _LOADED, "verify", str(bundle), "--key", str(tmp_path / "keys" / "toy.pub")],
        capture_output=True, text=True, cwd=v.cwd, env=v.env, timeout=300,
    )  # fmt: skip
    loaded = json.loads(probe.stdout.strip().splitlines()[-1])
    heavy = ("torch", "vllm", "fasttrack.pipeline.engines", "fasttrack.perf.loadgen")
    assert not [m for m in loaded if m.startswith(heavy)], [m for m in loaded if m.startswith(heavy)]
    html = tmp_path / "report.html"
    rep = v.run("report", str(out / "bundle"), "-o", str(html), "--key", str(tmp_path / "keys" / "toy.pub"))
    assert rep.returncode == 0, rep.stdout + rep.stderr
    page = html.read_text()
    assert "Toy check" in page and "toy_scores" in page and "toy_echo" in page
