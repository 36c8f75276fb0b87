"""One kernel suite to run, read from a scope's ``kernels`` section (models or plain dicts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping


@dataclass(frozen=True)
class SuiteSpec:
    """A kernel suite with everything the runner needs."""

    name: str
    path: Path
    """Suite directory (absolute)."""
    candidate: str | None = None
    """Candidate module: dotted name, or an absolute ``.py`` path; None = the suite's default."""
    requires_gpu: bool = True
    dtypes: tuple[str, ...] = ()
    tolerances: Mapping[str, Any] = field(default_factory=dict)
    dims: Mapping[str, int] = field(default_factory=dict)


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _is_file_spec(candidate: str) -> bool:
    return candidate.endswith(".py") or "/" in candidate or "\\" in candidate


def from_scope_section(section: Iterable[Any] | None, *, base_dir: Path) -> list[SuiteSpec]:
    """Normalise ``scope.kernels`` entries; relative paths resolve against ``base_dir``."""
    specs = []
    for i, entry in enumerate(section or []):
        name = _get(entry, "name") or f"kernels[{i}]"
        rel = _get(entry, "path")
        if not rel:
            raise ValueError(f"kernel suite {name!r} has no 'path' (the suite directory, relative to the scope file)")
        path = Path(rel)
        path = (path if path.is_absolute() else base_dir / path).resolve()
        cand = _get(entry, "candidate")
        if cand and _is_file_spec(cand) and not Path(cand).is_absolute():
            cand = str((base_dir / cand).resolve())
        specs.append(
            SuiteSpec(
                name=str(name),
                path=path,
                candidate=cand or None,
                requires_gpu=bool(_get(entry, "requires_gpu", True)),
                dtypes=tuple(_get(entry, "dtypes", None) or ()),
                tolerances=dict(_get(entry, "tolerances", None) or {}),
                dims=dict(_get(entry, "dims", None) or {}),
            )
        )
    return specs


def adhoc(path: Path, *, candidate: str | None = None) -> SuiteSpec:
    """A suite given by directory alone (no scope): GPU need is found out by running it."""
    path = path.resolve()
    return SuiteSpec(name=f"{path.parent.name}/{path.name}", path=path, candidate=candidate, requires_gpu=False)
