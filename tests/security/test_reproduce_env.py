"""``reproduce`` of a trusted-signed bundle whose recorded scope asks for code or paths on this host.

- Engine environment: only the allow-list of ``fasttrack.engine.untrusted`` reaches the engines.
  ``PYTHONWARNINGS``, ``BROWSER``, ``PYTHONPATH``, ``LD_PRELOAD`` and friends would run code as the user
  who reruns the bundle; they are refused before anything runs, naming each, unless the user passes
  ``--trust-bundle-env``. So are engine arguments that load code and a model builder no shipped
  suite uses.
- Names and paths: a scope name is a slug (``name: ../../victim`` once made ``reproduce`` delete and
  rewrite a folder outside the model cache), and every path a recorded scope names resolves under
  the folder its copy is written to.

Each refusal is one clear error, and nothing outside the run folder changes: the test folder, the
model cache (``$FASTTRACK_CACHE``) and a victim folder beside them are compared file by file. The rerun
(``run_validate``) is a double that records the call: no engine starts.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from security_testlib import HEAD, Keys, force_sign, rewrite_manifest, variant
from synthetic import Spec, make_bundle

from fasttrack import ROOT, pipeline
from fasttrack.errors import FasttrackError, ScopeError
from fasttrack.pipeline.reproduce import check_scope_paths, reproduce
from fasttrack.scope.loading import parse_scope

DEMO = (ROOT / "suites" / "demo-llama" / "scope.yaml").read_text()

#: Variables that load code (or pick what is loaded) in Python, the dynamic loader, vLLM, Hugging Face,
#: NCCL or the harness itself.
CODE_VARIABLES = [
    "PYTHONWARNINGS",
    "BROWSER",
    "PYTHONPATH",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PYTHONBREAKPOINT",
    "PYTHONINSPECT",
    "VLLM_PLUGINS",
    "VLLM_LOGGING_CONFIG_PATH",
    "VLLM_NCCL_SO_PATH",
    "VLLM_CUDART_SO_PATH",
    "VLLM_RUST_FRONTEND_PATH",
    "VLLM_ALLOW_INSECURE_SERIALIZATION",
    "VLLM_FORCE_AOT_LOAD",
    "VLLM_CACHE_ROOT",
    "VLLM_SERVER_DEV_MODE",
    "HF_HOME",
    "HF_ENDPOINT",
    "HF_TOKEN",
    "HF_MODULES_CACHE",
    "NCCL_NET_PLUGIN",
    "TRANSFORMERS_CACHE",
    "TORCHINDUCTOR_CACHE_DIR",
    "FASTTRACK_DEMO_DEFECT",
    "GIT_SSH_COMMAND",
    "PATH",
]
CODE_ARGS = [
    "--trust-remote-code",
    "--worker-cls=evil.W",
    "--middleware",
    "--tool_parser_plugin",
    "--logits-processors",
]


class Rerun:
    """Stands in for ``run_validate``: records the scope it was handed and stops."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def __call__(self, opts: Any, *, log: Any) -> Any:
        self.calls.append(opts)
        raise Stop


class Stop(Exception):
    pass


def snapshot(*roots: Path) -> dict[str, tuple[int, str]]:
    """Every file and link under ``roots``: (size, sha256 or link target)."""
    out: dict[str, tuple[int, str]] = {}
    for root in roots:
        if not root.exists():
            continue
        for p in sorted(root.rglob("*")):
            if p.is_symlink():
                out[str(p)] = (0, "-> " + os.readlink(p))
            elif p.is_file():
                out[str(p)] = (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            else:
                out[str(p)] = (-1, "dir")
    return out


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A model cache, a victim folder beside it, and the test folder: what must not change."""
    cache = tmp_path / "cache"
    (cache / "models").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("do not touch\n")
    monkeypatch.setenv("FASTTRACK_CACHE", str(cache))
    return {"root": tmp_path, "cache": cache, "victim": victim}


def recorded(base: Path, dest: Path, keys: Keys, text: str, *, model: str = "demo-llama") -> Path:
    """A trusted-signed copy of ``base`` that records ``text`` as its scope."""
    b = variant(base, dest)

    def edit(d: dict[str, Any]) -> None:
        d["scope"]["model"] = model
        d["scope"]["yaml"] = text
        d["scope"]["sha256"] = hashlib.sha256(text.encode()).hexdigest()

    rewrite_manifest(b, edit)
    return force_sign(b, keys.trusted)


def with_edit(edit: Any) -> str:
    doc = yaml.safe_load(DEMO)
    edit(doc)
    return yaml.safe_dump(doc, sort_keys=False)


def refused(
    b: Path,
    keys: Keys,
    world: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    *needles: str,
    exc: type = FasttrackError,
) -> str:
    """Run reproduce, expect one clear refusal naming every needle, and nothing changed outside the run folder."""
    rerun = Rerun()
    monkeypatch.setattr(pipeline, "run_validate", rerun)
    before = snapshot(world["root"])
    out = world["root"] / "rerun"
    with pytest.raises(exc) as e:
        reproduce(b, checks=["perf"], out=out, keys=[keys.trusted_pub], log=lambda m: None)
    msg = e.value.message + " " + (e.value.hint or "")
    for n in needles:
        assert n in msg, (n, msg)
    assert rerun.calls == []  # refused before anything runs
    assert not out.exists()
    assert snapshot(world["root"]) == before
    return msg


@pytest.mark.parametrize("var", CODE_VARIABLES)
@pytest.mark.parametrize("where", ["env", "baseline", "candidate"])
def test_code_loading_variables_are_refused(
    var: str, where: str, base_bundle: Path, keys: Keys, world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def edit(d: dict[str, Any]) -> None:
        e = d["engine"]
        (e["env"] if where == "env" else e[where].setdefault("env", {}))[var] = "evil:evil"

    b = recorded(base_bundle, world["root"] / "b", keys, with_edit(edit))
    field = "engine.env" if where == "env" else f"engine.{where}.env"
    refused(b, keys, world, monkeypatch, f"{field}.{var}", "--trust-bundle-env")


@pytest.mark.parametrize("arg", CODE_ARGS)
@pytest.mark.parametrize("where", ["common_args", "candidate", "point_args", "fallback", "variant"])
def test_code_loading_arguments_are_refused(
    arg: str, where: str, base_bundle: Path, keys: Keys, world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def edit(d: dict[str, Any]) -> None:
        e = d["engine"]
        if where == "common_args":
            e["common_args"].append(arg)
        elif where == "candidate":
            e["candidate"]["args"].append(arg)
        elif where == "point_args":
            e["point_args"]["max_model_len"].append(arg)
        elif where == "variant":  # a reference variant's arguments start one more engine of the baseline
            d["gates"]["equivalence"]["reference"]["variants"]["eager"].append(arg)
        else:
            d["fallback"]["unsupported_deployment_args"].append(arg)

    b = recorded(base_bundle, world["root"] / "b", keys, with_edit(edit))
    flag = "--" + arg[2:].split("=")[0].replace("_", "-")
    refused(b, keys, world, monkeypatch, flag, "--trust-bundle-env")


@pytest.mark.parametrize(
    "builder", ["tests/conftest.py", "scripts/../fasttrack/cli/__init__.py", "benchmarks/agreement.py"]
)
def test_a_builder_no_shipped_suite_uses_is_refused(
    builder: str, base_bundle: Path, keys: Keys, world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    b = recorded(base_bundle, world["root"] / "b", keys, with_edit(lambda d: d["model"].update(local_builder=builder)))
    refused(b, keys, world, monkeypatch, "local_builder", exc=FasttrackError)


def test_the_allow_list_passes_and_trust_bundle_env_lifts_it(
    base_bundle: Path, keys: Keys, world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def allowed(d: dict[str, Any]) -> None:
        d["engine"]["env"].update(
            {"VLLM_CPU_OMP_THREADS_BIND": "0", "HF_HUB_DISABLE_TELEMETRY": "1", "CUDA_VISIBLE_DEVICES": "0,1"}
        )

    rerun = Rerun()
    monkeypatch.setattr(pipeline, "run_validate", rerun)
    b = recorded(base_bundle, world["root"] / "ok", keys, with_edit(allowed))
    with pytest.raises(Stop):
        reproduce(b, checks=["perf"], out=world["root"] / "r1", keys=[keys.trusted_pub], log=lambda m: None)
    assert len(rerun.calls) == 1
    hostile = recorded(
        base_bundle, world["root"] / "trusted", keys, with_edit(lambda d: d["engine"]["env"].update(PYTHONPATH="/x"))
    )
    with pytest.raises(Stop):
        reproduce(
            hostile,
            checks=["perf"],
            out=world["root"] / "r2",
            keys=[keys.trusted_pub],
            trust_bundle_env=True,
            log=lambda m: None,
        )
    assert len(rerun.calls) == 2


def test_the_cli_refuses_with_exit_2(base_bundle: Path, keys: Keys, world: dict[str, Path]) -> None:
    b = recorded(
        base_bundle, world["root"] / "b", keys, with_edit(lambda d: d["engine"]["env"].update(PYTHONWARNINGS="x"))
    )
    before = snapshot(world["root"])
    env = {**os.environ, "FASTTRACK_CACHE": str(world["cache"]), "COLUMNS": "300"}
    res = subprocess.run(
        [sys.executable, "-m", "fasttrack", "reproduce", str(b), "--checks", "perf", "--key", str(keys.trusted_pub),
         "--out", str(world["root"] / "rerun")],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )  # fmt: skip
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "engine.env.PYTHONWARNINGS" in res.stderr, res.stderr
    assert snapshot(world["root"]) == before


# --------------------------------------------------------------------------- names and paths


@pytest.mark.parametrize(
    "name",
    [
        "../../victim",
        "../victim",
        "/tmp/victim",
        "a/../../victim",
        "..",
        ".",
        ".hidden",
        "victim/..",
        "x\\y",
        "demo\u2215x",
    ],
)
def test_a_scope_name_that_is_not_a_slug_is_refused(
    name: str, base_bundle: Path, keys: Keys, world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    b = recorded(base_bundle, world["root"] / "b", keys, with_edit(lambda d: d.update(name=name)))
    msg = refused(b, keys, world, monkeypatch, "name", exc=ScopeError)
    assert "pattern" in msg or "match" in msg, msg


def test_the_model_cache_path_stays_under_its_root(world: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from fasttrack.host.models import model_cache_path, resolve_model

    cache, victim = world["cache"], world["victim"]
    assert model_cache_path("demo-llama") == cache / "models" / "demo-llama"
    # a name that slipped past the schema (built without validation) is still refused, before any write
    scope = parse_scope(DEMO, source="demo").model_copy(update={"name": "../../victim"})
    before = snapshot(world["root"])
    with pytest.raises(FasttrackError, match="not a slug"):
        resolve_model(scope, log=lambda m: None)
    # a link inside the cache that leads out of it
    (cache / "models" / "linked").symlink_to(victim, target_is_directory=True)
    before = snapshot(world["root"])
    with pytest.raises(FasttrackError, match="outside"):
        resolve_model(scope.model_copy(update={"name": "linked"}), log=lambda m: None)
    assert snapshot(world["root"]) == before and (victim / "precious.txt").read_text() == "do not touch\n"
    # a symlinked cache root is the user's choice, and names inside it still resolve under it
    real = world["root"] / "real-cache"
    (real / "models").mkdir(parents=True)
    link = world["root"] / "cache-link"
    link.symlink_to(real, target_is_directory=True)
    monkeypatch.setenv("FASTTRACK_CACHE", str(link))
    assert model_cache_path("demo-llama") == link / "models" / "demo-llama"
    (real / "models" / "up").symlink_to(world["root"], target_is_directory=True)
    with pytest.raises(FasttrackError, match="outside"):
        model_cache_path("up")


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda d: d["evals"][0].update(data="/etc/passwd"), "evals[0].data"),
        (lambda d: d["evals"][1].update(data="data/../../../../../etc/passwd"), "evals[1].data"),
        (lambda d: d["workloads"][3].update(prompts="../demo-llama/../../../x.jsonl"), "workloads[3].prompts"),
        (lambda d: d["workloads"][4].update(trace="//etc/hosts"), "workloads[4].trace"),
        (lambda d: d["kernels"][0].update(path="../../fasttrack"), "kernels[0].path"),
        (lambda d: d["kernels"][0].update(candidate="../../../evil.py"), "kernels[0].candidate"),
        (
            lambda d: d["gates"]["perf"]["calibration"].update(record="/etc/shadow"),
            "gates.perf.calibration.record",
        ),
        (
            lambda d: d["gates"]["perf"]["calibration"].update(keys=["../../../../root/.ssh/id_ed25519.pub"]),
            "gates.perf.calibration.keys[0]",
        ),
    ],
)
def test_recorded_paths_stay_in_the_scope_folder(
    edit: Any, field: str, base_bundle: Path, keys: Keys, world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    b = recorded(base_bundle, world["root"] / "b", keys, with_edit(edit))
    rerun = Rerun()
    monkeypatch.setattr(pipeline, "run_validate", rerun)
    before = snapshot(world["root"])
    with pytest.raises(FasttrackError, match="outside the suites folder") as e:
        reproduce(b, checks=["perf"], out=world["root"] / "rerun", keys=[keys.trusted_pub], log=lambda m: None)
    assert field in e.value.message and rerun.calls == []
    assert snapshot(world["root"]) == before


def test_a_link_in_the_scope_folder_that_leads_out_is_refused(world: dict[str, Path]) -> None:
    folder = world["root"] / "scope"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "aime25.jsonl").symlink_to(world["victim"] / "precious.txt")
    scope = parse_scope(DEMO, source="demo")
    with pytest.raises(FasttrackError, match=r"evals\[0\]\.data"):
        check_scope_paths(scope, folder)
    # the same scope in a folder of its own files passes
    (folder / "data" / "aime25.jsonl").unlink()
    check_scope_paths(scope, folder)


def test_a_shipped_suites_reference_variants_pass_but_not_with_another_argument() -> None:
    """The GPU demo's variants (``--enforce-eager``, ``--dtype float32``) pass as shipped; a variant argument that
    loads code is refused even where the rest of the suite is as shipped."""
    from fasttrack.pipeline.reproduce import check_recorded_scope

    doc = yaml.safe_load((ROOT / "suites" / "demo-llama-gpu" / "scope.yaml").read_text())
    check_recorded_scope(yaml.safe_dump(doc, sort_keys=False), source="bundle")
    doc["gates"]["equivalence"]["reference"]["variants"]["eager"].append("--trust-remote-code")
    with pytest.raises(FasttrackError, match="gates.equivalence.reference.variants.eager: --trust-remote-code"):
        check_recorded_scope(yaml.safe_dump(doc, sort_keys=False), source="bundle")


def test_a_shipped_suites_own_engine_settings_pass_but_not_with_another_model() -> None:
    """Kimi K3's suite starts its engines with ``--trust-remote-code``: a recorded scope whose model and engine
    settings are exactly the shipped suite's passes (the user trusts that suite already); the same settings
    with another model are refused (the flag would run that model's code)."""
    from fasttrack.pipeline.reproduce import check_recorded_scope

    doc = yaml.safe_load((ROOT / "suites" / "kimi-k3" / "scope.yaml").read_text())
    assert "--trust-remote-code" in doc["engine"]["common_args"]
    doc["title"] = "recorded: " + doc["title"]
    check_recorded_scope(yaml.safe_dump(doc, sort_keys=False), source="bundle")
    doc["model"]["id"] = "someone/else"
    with pytest.raises(FasttrackError, match="engine.common_args: --trust-remote-code"):
        check_recorded_scope(yaml.safe_dump(doc, sort_keys=False), source="bundle")


def test_paths_into_a_sibling_suite_are_shipped_files(
    base_bundle: Path, keys: Keys, world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPU demo suite names the CPU demo's data (``../demo-llama/data/...``): a recorded copy of it runs with
    its relative paths starting from the shipped suite of its name, where those paths find the shipped files."""
    doc = yaml.safe_load((ROOT / "suites" / "demo-llama-gpu" / "scope.yaml").read_text())
    assert any(str(e.get("data", "")).startswith("../demo-llama/") for e in doc["evals"])
    doc["title"] = "recorded: " + doc["title"]
    gpu = world["root"] / "gpu"  # a bundle of the GPU suite (re-judged by the scope it records: its own plan)
    make_bundle(gpu, Spec(model="demo-llama-gpu", seed=7, head_sha=HEAD), sign_keys=[keys.trusted])
    b = recorded(gpu, world["root"] / "b", keys, yaml.safe_dump(doc, sort_keys=False), model="demo-llama-gpu")
    seen: list[bool] = []

    def rerun(opts: Any, *, log: Any) -> Any:
        base = Path(opts.scope_base_dir)
        seen.append(base == ROOT / "suites" / "demo-llama-gpu" and (base / "../demo-llama/data").resolve().is_dir())
        raise Stop

    monkeypatch.setattr(pipeline, "run_validate", rerun)
    with pytest.raises(Stop):
        reproduce(b, checks=["perf"], out=world["root"] / "rerun", keys=[keys.trusted_pub], log=lambda m: None)
    assert seen == [True]
