"""Where an eval's data comes from: a local file in the original format, or the hub.

Resolution order for one eval (:func:`resolve_dataset`):

1. a path given on the command line (``fasttrack validate --eval-data NAME=PATH``, which the
   evals check reads from ``RunContext.eval_data``);
2. the scope's ``data`` (relative to the scope file's folder);
3. the hub dataset (the scope's ``hub_dataset``, else the kind's default), when the
   hub is reachable.

A path that was given but does not exist, a file without the format's columns, or a
dataset with no rows is an error (:class:`DatasetNotFound`, :class:`DatasetFormatError`)
with one paragraph saying what to do; an eval never "passes" on zero samples.

Local files keep the original formats: ``.jsonl``/``.json`` (JSON Lines or a JSON
array), ``.parquet`` (``openai/mrcr`` ships parquet) and ``.csv``; a folder means
every such file below it, in sorted order (the layout of a hub snapshot).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import Field

from fasttrack.errors import FasttrackError
from fasttrack.evals.mrcr import MRCR_REQUIRED, parse_prompt
from fasttrack.inputs.jsonl import json_lines
from fasttrack.modelbase import DocModel

EvalKind = Literal["aime25", "mrcr"]

DEFAULT_HUB: dict[str, str] = {"aime25": "math-ai/aime25", "mrcr": "openai/mrcr"}
"""Hub dataset of each eval kind when the scope names none."""
HUB_SPLIT: dict[str, str] = {"aime25": "test", "mrcr": "train"}
"""Split each hub dataset keeps its samples in."""
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {"aime25": ("problem", "answer"), "mrcr": MRCR_REQUIRED}
"""Columns without which an eval cannot be graded."""
FORMATS: dict[str, str] = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
"""File suffix -> the loader name lm-eval/datasets use for it."""


class DatasetNotFound(FasttrackError):
    """An eval's dataset is neither on disk where it was said to be nor reachable on the hub."""


class DatasetFormatError(FasttrackError):
    """An eval's dataset exists but is not in the original format (missing columns, bad rows, empty)."""


class ResolvedDataset(DocModel):
    """One eval's data, loaded and checked."""

    eval: str
    """Eval name (from the scope)."""
    kind: EvalKind
    source: Literal["local", "hub"]
    """Where the rows came from."""
    location: str
    """The path (local) or hub dataset id (hub)."""
    given_by: Literal["command_line", "scope", "hub"]
    """Which setting named the location."""
    files: list[str] = Field(default_factory=list)
    """Files read (local)."""
    format: str
    """'json', 'parquet', 'csv' (local) or 'hub'."""
    sha256: str
    """sha256 over the bytes of the files read (local), or over the canonical JSON rows (hub)."""
    n_rows: int
    columns: list[str]
    rows: list[dict[str, Any]] = Field(default_factory=list, exclude=True, repr=False)
    """The rows (not serialised)."""

    def describe(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# --------------------------------------------------------------------------- hub


def hub_offline_reason() -> str | None:
    """Why the hub is known to be off (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE), or None."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in {"1", "true", "yes", "on"}:
            return f"{var}={os.environ[var]}"
    return None


def hub_reachable(dataset_id: str, *, timeout: float = 5.0) -> bool:
    """Whether the hub answers for ``dataset_id`` (False when offline mode is set)."""
    if hub_offline_reason():
        return False
    import httpx

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        r = httpx.get(f"{endpoint}/api/datasets/{dataset_id}", timeout=timeout, follow_redirects=True)
    except httpx.HTTPError:
        return False
    return r.status_code == 200


def _load_hub(dataset_id: str, kind: EvalKind) -> list[dict[str, Any]]:
    import datasets  # heavy; only when the hub is used

    ds = datasets.load_dataset(dataset_id, split=HUB_SPLIT[kind])
    return [dict(r) for r in ds]


# --------------------------------------------------------------------------- local files


def _files_of(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in FORMATS)
        if not files:
            raise DatasetFormatError(
                f"folder {str(path)!r} holds no data file ({', '.join(sorted(FORMATS))}).",
                hint="Point the eval at a file in the original format, or at a folder of such files.",
            )
        kinds = {FORMATS[p.suffix.lower()] for p in files}
        if len(kinds) > 1:
            raise DatasetFormatError(
                f"folder {str(path)!r} mixes data formats ({', '.join(sorted(kinds))}).",
                hint="Keep one format per dataset folder.",
            )
        return files
    if path.suffix.lower() not in FORMATS:
        raise DatasetFormatError(
            f"{str(path)!r} is not a supported data file (suffix {path.suffix or '(none)'!r}).",
            hint=f"Use one of {', '.join(sorted(FORMATS))}, the formats the original datasets are published in.",
        )
    return [path]


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of one local data file (JSON Lines or JSON array, parquet, csv)."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        if suffix == ".csv":
            with open(path, newline="", encoding="utf-8") as f:
                return [dict(r) for r in csv.DictReader(f)]
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DatasetFormatError(f"could not read {str(path)!r}: {exc}") from exc
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise DatasetFormatError(f"{str(path)!r} is not valid JSON: {exc}") from exc
        rows = data
    else:
        rows = [row for _, row in json_lines(text, lambda n, exc: _bad_line(path, n, exc))]
    bad = [i for i, r in enumerate(rows) if not isinstance(r, dict)]
    if bad:
        raise DatasetFormatError(f"{str(path)!r}: row {bad[0] + 1} is not a JSON object.")
    return rows


def _bad_line(path: Path, n: int, exc: ValueError) -> DatasetFormatError:
    return DatasetFormatError(
        f"{str(path)!r} line {n} is not valid JSON: {exc}", hint="JSON Lines files hold one JSON object per line."
    )


def _sha256_files(files: list[Path]) -> str:
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode() + b"\0")
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def rows_sha256(rows: list[dict[str, Any]]) -> str:
    """sha256 of rows as canonical JSON Lines (sorted keys)."""
    h = hashlib.sha256()
    for r in rows:
        h.update(json.dumps(r, sort_keys=True, ensure_ascii=False, default=str).encode())
        h.update(b"\n")
    return h.hexdigest()


def validate_rows(rows: list[dict[str, Any]], kind: EvalKind, where: str) -> None:
    """Check the columns (and for MRCR the conversations) of the original format."""
    if not rows:
        raise DatasetFormatError(
            f"the {kind} dataset at {where} has no rows; an eval on zero samples proves nothing.",
            hint="Give a file with samples in the original format.",
        )
    need = REQUIRED_COLUMNS[kind]
    for i, r in enumerate(rows):
        missing = [c for c in need if c not in r or r[c] is None]
        if missing:
            raise DatasetFormatError(
                f"row {i + 1} of the {kind} dataset at {where} lacks column(s) {missing}; "
                f"the original format has {', '.join(need)}.",
                hint="Convert the file to the original column names (see fasttrack.evals.mrcr.MRCR_COLUMNS for MRCR; "
                "problem, answer, id for AIME25).",
            )
        if kind == "mrcr":
            try:
                parse_prompt(r["prompt"])
                int(r["n_needles"])
            except (ValueError, TypeError) as exc:
                raise DatasetFormatError(f"row {i + 1} of the MRCR dataset at {where} is malformed: {exc}") from exc
            if not isinstance(r["random_string_to_prepend"], str) or not isinstance(r["answer"], str):
                raise DatasetFormatError(
                    f"row {i + 1} of the MRCR dataset at {where}: 'answer' and 'random_string_to_prepend' "
                    "must be strings."
                )


def load_local(path: Path, kind: EvalKind) -> tuple[list[Path], list[dict[str, Any]]]:
    files = _files_of(path)
    rows: list[dict[str, Any]] = []
    for f in files:
        rows.extend(read_rows(f))
    validate_rows(rows, kind, repr(str(path)))
    return files, rows


# --------------------------------------------------------------------------- resolution


def resolve_dataset(
    *,
    name: str,
    kind: EvalKind,
    data: str | None,
    hub_dataset: str | None,
    resolve_path: Callable[[str], Path],
    override: str | None = None,
    hub_check: Callable[[str], bool] = hub_reachable,
    hub_loader: Callable[[str, EvalKind], list[dict[str, Any]]] = _load_hub,
) -> ResolvedDataset:
    """Find, read and check one eval's data (see the module docstring for the order).

    ``resolve_path`` turns the scope's relative ``data`` into a path (the scope file's
    folder); ``override`` is a path from the command line (absolute or relative to
    the working directory).
    """
    hub_id = hub_dataset or DEFAULT_HUB[kind]
    if override is not None:
        path = Path(override).expanduser()
        if not path.exists():
            raise DatasetNotFound(
                f"dataset {name!r} not found at {str(path)!r} (given on the command line).",
                hint="Check the path passed with --eval-data; it must be a file (or folder) in the original format.",
            )
        return _local(name, kind, path, "command_line")
    local: Path | None = resolve_path(data) if data else None
    if local is not None and local.exists():
        return _local(name, kind, local, "scope")
    if hub_check(hub_id):
        rows = hub_loader(hub_id, kind)
        validate_rows(rows, kind, f"hub dataset {hub_id!r}")
        return ResolvedDataset(
            eval=name,
            kind=kind,
            source="hub",
            location=hub_id,
            given_by="hub",
            format="hub",
            sha256=rows_sha256(rows),
            n_rows=len(rows),
            columns=_columns(rows),
            rows=rows,
        )
    offline = hub_offline_reason()
    hub_note = f"the hub is unreachable ({offline})" if offline else f"the hub dataset {hub_id!r} is unreachable"
    if local is not None:
        raise DatasetNotFound(
            f"dataset {name!r} not found at {str(local)!r} (and {hub_note}).",
            hint=f"Put the {kind} data in its original format at that path (the scope's 'data'), "
            f"or pass another file with --eval-data {name}=PATH.",
        )
    raise DatasetNotFound(
        f"dataset {name!r} has no local file (the scope gives no 'data') and {hub_note}.",
        hint=f"Download {hub_id} where the hub is reachable and pass it with --eval-data {name}=PATH, "
        "or set 'data' for this eval in the scope.",
    )


def _local(name: str, kind: EvalKind, path: Path, given_by: Literal["command_line", "scope"]) -> ResolvedDataset:
    files, rows = load_local(path, kind)
    return ResolvedDataset(
        eval=name,
        kind=kind,
        source="local",
        location=str(path),
        given_by=given_by,
        files=[str(f) for f in files],
        format=FORMATS[files[0].suffix.lower()],
        sha256=_sha256_files(files),
        n_rows=len(rows),
        columns=_columns(rows),
        rows=rows,
    )


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for r in rows:
        for k in r:
            seen.setdefault(k, None)
    return list(seen)
