"""What a check sees of the run: the run context, one live engine, and the provenance recorder."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fasttrack import ROOT
from fasttrack.results import PathEvidence, Side
from fasttrack.scope import SUITES_DIR, LoadedScope, Scope

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine.handle import EngineHandle
    from fasttrack.host.hardware import HostInfo
    from fasttrack.host.models import ResolvedModel
    from fasttrack.planning.plan import EngineGroup, Plan


@dataclass
class EngineSession:
    """One live engine, handed to ``EngineCheck.collect``."""

    side: Side
    group: EngineGroup
    lifetime: int
    """0-based index of this engine lifetime for (group, side)."""
    engine: EngineHandle
    """The live engine: base URL, served model name, client, profiler, log."""


def sha256_path(path: Path) -> str:
    """sha256 of a file, or of a folder: ``relpath NUL sha256 NL`` per file, sorted (as bundles hash trees)."""
    if path.is_file():
        return _file_sha256(path)
    h = hashlib.sha256()
    for p in sorted((p for p in path.rglob("*") if p.is_file()), key=lambda p: p.relative_to(path).as_posix()):
        h.update(f"{p.relative_to(path).as_posix()}\0{_file_sha256(p)}\n".encode())
    return h.hexdigest()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class ProvenanceRecorder:
    """The seeds and input data a run's checks used; the bundle's provenance lists them.

    Names are ``<check>/<what>`` for seeds, and the path (relative to the repository when
    inside it) or ``<check>/<name>`` for datasets. Recording the same name twice with a
    different value is a harness bug and raises ``ValueError``.
    """

    def __init__(self) -> None:
        self.seeds: dict[str, int] = {}
        self.datasets: dict[str, str] = {}
        """name -> sha256."""

    def seed(self, name: str, value: int) -> None:
        """Record a seed a check used."""
        _put(self.seeds, name, int(value), "seed")

    def dataset(self, name: str, sha256: str) -> None:
        """Record input data by name and content hash."""
        _put(self.datasets, name, sha256, "dataset")

    def input_file(self, path: Path) -> str:
        """Record a file (or folder) the checks read as a dataset; returns its sha256."""
        p = Path(path).resolve()
        try:
            name = p.relative_to(ROOT).as_posix()
        except ValueError:
            name = str(p)
        digest = self.datasets.get(name) or sha256_path(p)
        self.dataset(name, digest)
        return digest


def _put(store: dict, name: str, value: object, what: str) -> None:
    old = store.get(name)
    if old is not None and old != value:
        raise ValueError(f"{what} {name!r} recorded twice with different values ({old!r}, {value!r})")
    store[name] = value


@dataclass(frozen=True)
class ChangeRequest:
    """The pull request (or commit range) a run ties its bundle to (``--repo``, ``--base``, ``--head``)."""

    repo: Path | None
    """The git repository holding base and head (None: only ``--head`` was given, the diff cannot be checked)."""
    base: str | None
    head: str | None


@dataclass
class RunContext:
    """Everything a check may read while it runs."""

    scope: Scope
    plan: Plan
    run_dir: Path
    loaded: LoadedScope | None = None
    """The scope file the run loaded (its text, hash and folder); None for a scope built in memory."""
    host: HostInfo | None = None
    """The host the run is on (set by the pipeline)."""
    model: ResolvedModel | None = None
    """The model the engines serve, when fasttrack starts them (set by the pipeline before the first engine)."""
    eval_data: dict[str, Path] = field(default_factory=dict)
    """Eval name -> data file or folder given with ``--eval-data NAME=PATH`` (overrides the scope's data)."""
    rehearsal: bool = False
    log: Callable[[str], None] = print
    evidence: list[PathEvidence] = field(default_factory=list)
    """Path evidence contributed by every check; the coverage check judges it."""
    provenance: ProvenanceRecorder = field(default_factory=ProvenanceRecorder)
    """Seeds and datasets the checks used, for the bundle's provenance."""
    change: ChangeRequest | None = None
    """The PR the bundle is tied to; None: the bundle is not PR evidence."""

    @property
    def tier(self) -> str:
        """The tier that runs (the plan's)."""
        return self.plan.tier

    @property
    def base_dir(self) -> Path:
        """The folder the scope's relative paths start from: the scope file's, else ``suites/<name>/``."""
        if self.loaded is not None:
            return self.loaded.base_dir
        return SUITES_DIR / str(self.scope.name)

    def resolve(self, rel: str | Path) -> Path:
        """A path from the scope, relative to :attr:`base_dir` (absolute paths as given)."""
        p = Path(rel)
        return p if p.is_absolute() else self.base_dir / p

    def artifact_dir(self, check: str) -> Path:
        d = self.run_dir / "artifacts" / check
        d.mkdir(parents=True, exist_ok=True)
        return d
