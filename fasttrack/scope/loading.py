"""Finding and loading scope files: YAML to :class:`~fasttrack.scope.manifest.Scope`, with
errors that name the file, the line and the dotted field; the JSON Schema."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from fasttrack.errors import ScopeError
from fasttrack.limits import YAML_MAX_BYTES, read_capped, yaml_problem
from fasttrack.scope.common import SUITES_DIR
from fasttrack.scope.gates import Gates
from fasttrack.scope.manifest import Scope


class LoadedScope(BaseModel):
    """A scope plus where it came from."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    scope: Scope
    path: Path
    text: str
    sha256: str
    base: Path | None = None
    """The folder the scope's relative paths start from when it is not the file's own (a copy of a suite's
    scope written elsewhere, whose paths still mean the suite's files)."""

    @property
    def base_dir(self) -> Path:
        """The folder every relative path in the scope is resolved against: the scope file's folder."""
        return self.base if self.base is not None else self.path.parent

    def resolve(self, rel: str) -> Path:
        """A path from the scope, relative to the scope file's folder."""
        p = Path(rel)
        return p if p.is_absolute() else (self.base_dir / p)


def available_suites() -> list[str]:
    return sorted(p.parent.name for p in SUITES_DIR.glob("*/scope.yaml"))


def find_scope(name_or_path: str) -> Path:
    """A suite name (folder under suites/) or a path to a scope file."""
    p = Path(name_or_path)
    if p.suffix in {".yaml", ".yml"} or p.is_file():
        if not p.is_file():
            raise ScopeError(f"scope file {str(p)!r} does not exist.")
        return p
    if p.is_dir() and (p / "scope.yaml").is_file():
        return p / "scope.yaml"
    cand = SUITES_DIR / name_or_path / "scope.yaml"
    if cand.is_file():
        return cand
    names = ", ".join(available_suites()) or "(none)"
    raise ScopeError(
        f"no suite named {name_or_path!r}.",
        hint=f"Available suites: {names}. Or pass a path to a scope.yaml.",
    )


def _line_map(text: str) -> dict[tuple[Any, ...], int]:
    """Map dotted YAML paths (tuples of keys/indices) to 1-based line numbers."""
    out: dict[tuple[Any, ...], int] = {}
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return out

    def walk(n: yaml.Node, path: tuple[Any, ...]) -> None:
        out[path] = n.start_mark.line + 1
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                key = k.value
                out[path + (key,)] = k.start_mark.line + 1
                walk(v, path + (key,))
                out[path + (key,)] = k.start_mark.line + 1
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                walk(v, path + (i,))

    if node is not None:
        walk(node, ())
    return out


def _loc_line(loc: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> int | None:
    # pydantic locs may contain union-branch tags; strip non-path parts by longest known prefix
    path = tuple(x for x in loc if not (isinstance(x, str) and ("[" in x or x.startswith("function-"))))
    for i in range(len(path), -1, -1):
        if path[:i] in lines:
            return lines[path[:i]]
    return None


def parse_scope(text: str, *, source: str = "<scope>") -> Scope:
    """Parse YAML text into a Scope; raise ScopeError naming file, line and field."""
    return validate_scope_doc(load_scope_doc(text, source=source), text, source=source)


def load_scope_doc(text: str, *, source: str = "<scope>") -> dict[str, Any]:
    """A scope's YAML as a mapping, within the limits (size, nesting, alias expansion); ScopeError otherwise."""
    problem = yaml_problem(text, source)  # size, nesting and alias expansion, before anything is built
    if problem:
        raise ScopeError(
            f"{problem}.", hint="A scope is a few KiB of plain YAML; see README.md, 'Security' for the limits."
        )
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScopeError(
            f"{where}: malformed YAML: {problem}.",
            hint="Fix the YAML syntax at that line (indentation, quoting, a missing ':').",
        ) from None
    if not isinstance(data, dict):
        raise ScopeError(f"{source}: a scope must be a YAML mapping at the top level, got {type(data).__name__}.")
    return data


def validate_scope_doc(data: dict[str, Any], text: str, *, source: str = "<scope>") -> Scope:
    """A Scope from its parsed YAML (``text``: the YAML it came from, for the line numbers of errors)."""
    try:
        return Scope.model_validate(data)
    except ValidationError as exc:
        lines = _line_map(text)
        msgs = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            dotted = ".".join(str(x) for x in loc) or "(top level)"
            line = _loc_line(loc, lines)
            where = f"{source}:{line}" if line else source
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown key (not part of the scope schema; check the spelling)"
            elif err["type"] == "missing":
                msg = "required field is missing"
            msgs.append(f"{where}: {dotted}: {msg}")
        raise ScopeError(
            "invalid scope:\n  " + "\n  ".join(msgs),
            hint="See schemas/scope.schema.json for every field and its type.",
        ) from None


def load_scope(name_or_path: str, *, base_dir: Path | None = None) -> LoadedScope:
    """Find, read and parse a scope; ``base_dir`` overrides the folder its relative paths start from
    (default: the scope file's folder)."""
    path = find_scope(name_or_path)
    try:
        data = read_capped(path, YAML_MAX_BYTES)
        if data is None:
            raise ScopeError(f"scope file {str(path)!r} is larger than {YAML_MAX_BYTES} bytes (the limit).")
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as read_text() reads it
    except (OSError, UnicodeDecodeError) as exc:
        raise ScopeError(f"cannot read scope file {str(path)!r}: {exc}.") from None
    scope = parse_scope(text, source=str(path))
    return LoadedScope(
        scope=scope,
        path=path.resolve(),
        text=text,
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        base=base_dir.resolve() if base_dir is not None else None,
    )


def json_schema(features: Sequence[str] | None = None) -> dict[str, Any]:
    """The scope's JSON Schema (checked in as schemas/scope.schema.json): ``gates`` has a section per declared gate
    model, and ``features`` (and the tiers' ``features``) the names in ``features`` when they are given (the
    features check's registry; ``fasttrack schemas`` gives them)."""
    schema = Scope.model_json_schema()
    gates = Gates.declared_schema()
    schema["$defs"].update(gates.pop("$defs", {}))
    schema["$defs"]["Gates"] = gates
    if features is not None:
        names = {"enum": list(features), "type": "string"}
        schema["properties"]["features"]["items"] = names
        tier_features = schema["$defs"]["TierSpec"]["properties"]["features"]["anyOf"]
        next(a for a in tier_features if a.get("type") == "array")["items"] = names
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://fasttrack.dev/schemas/scope.schema.json"
    return schema
