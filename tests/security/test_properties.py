"""Property-based checks over the parsers that take untrusted text: scope YAML, manifests,
JSON nesting and shard specifications. Whatever the input, each either accepts it or raises
its own one-paragraph error: never a RecursionError, a MemoryError or a foreign exception."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fasttrack import limits
from fasttrack.bundle.consistency import schema_problems
from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.manifest import load_manifest
from fasttrack.errors import PlanError, ScopeError
from fasttrack.planning.plan import parse_shard
from fasttrack.scope.loading import parse_scope

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=40,
)


def depth(v: Any) -> int:
    if isinstance(v, dict):
        return 1 + max((depth(x) for x in v.values()), default=0)
    if isinstance(v, list):
        return 1 + max((depth(x) for x in v), default=0)
    return 0


@SETTINGS
@given(json_values)
def test_json_depth_is_the_nesting_depth(value: Any) -> None:
    text = json.dumps(value)
    assert limits.json_depth(text) == depth(value)
    assert limits.json_depth(text.encode()) == depth(value)


@SETTINGS
@given(st.integers(min_value=limits.JSON_MAX_DEPTH + 1, max_value=50_000), st.sampled_from("[{"))
def test_json_past_the_depth_limit_is_caught_before_parsing(n: int, opener: str) -> None:
    text = ("[" if opener == "[" else '{"k":') * n  # unclosed, as a hostile file may leave it
    assert limits.json_depth(text) is None
    assert limits.json_problem(text, "x") is not None


@st.composite
def yaml_documents(draw: st.DrawFn) -> str:
    """YAML text with anchors, aliases (nested ones too), flow and block collections."""
    n = draw(st.integers(min_value=1, max_value=8))
    lines = []
    for i in range(n):
        kind = draw(st.sampled_from(["scalar", "flow", "alias-list", "deep", "merge"]))
        if kind == "scalar":
            lines.append(f"k{i}: &a{i} {draw(st.text(alphabet='abc xyz:#-', max_size=10))!r}")
        elif kind == "flow":
            lines.append(f"k{i}: &a{i} [" + ", ".join(draw(st.lists(st.sampled_from("xyz"), max_size=12))) + "]")
        elif kind == "alias-list" and i:
            refs = draw(st.lists(st.integers(min_value=0, max_value=i - 1), min_size=1, max_size=12))
            lines.append(f"k{i}: &a{i} [" + ", ".join(f"*a{r}" for r in refs) + "]")
        elif kind == "deep":
            d = draw(st.integers(min_value=1, max_value=200))
            lines.append(f"k{i}: &a{i} " + "[" * d + "x" + "]" * d)
        else:
            lines.append(f"k{i}: &a{i} {{x: 1}}")
    return "\n".join(lines) + "\n"


@SETTINGS
@given(yaml_documents())
def test_scope_yaml_is_bounded_or_refused(text: str) -> None:
    problem = limits.yaml_problem(text, "s.yaml")
    try:
        parse_scope(text, source="s.yaml")
    except ScopeError as exc:
        if problem is not None:
            assert problem in exc.message
    else:  # pragma: no cover - none of these is a valid scope
        raise AssertionError("not a scope")


@SETTINGS
@given(st.integers(min_value=3, max_value=12), st.integers(min_value=3, max_value=12))
def test_alias_expansion_is_counted_like_a_copy(width: int, levels: int) -> None:
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    text = "\n".join(lines) + "\n"
    size = 1 + width  # a0: the sequence and its scalars
    total = 1 + 1 + size  # the document's mapping, key a0, a0
    for _ in range(1, levels):
        size = 1 + width * size  # every alias counts as a full copy of what it names
        total += 1 + size
    problem = limits.yaml_problem(text, "s")
    assert (problem is not None) == (total > limits.YAML_MAX_NODES), (total, problem)


def _manifest() -> dict[str, Any]:
    import tempfile

    from synthetic import Spec, make_bundle

    with tempfile.TemporaryDirectory() as tmp:
        b = make_bundle(Path(tmp) / "b", Spec(model="demo-llama", seed=3))
        return json.loads((b / "manifest.json").read_bytes())


_BASE: dict[str, Any] = {}


def base_manifest() -> dict[str, Any]:
    if not _BASE:
        _BASE.update(_manifest())
    return json.loads(json.dumps(_BASE))


def _paths(v: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(v, dict):
        for k, x in v.items():
            out += _paths(x, prefix + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v[:3]):
            out += _paths(x, prefix + (i,))
    return out


@SETTINGS
@given(st.data())
def test_a_mutated_manifest_is_a_result_or_a_bundle_error(data: st.DataObject) -> None:
    doc = base_manifest()
    paths = [p for p in _paths(doc) if p]
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        path = data.draw(st.sampled_from(paths))
        parent = doc
        try:
            for k in path[:-1]:
                parent = parent[k]
            new = data.draw(
                json_values
                | st.sampled_from(["1/99999999999999999999", "0" * 7, "../../x", "\x1b[2J", ""])
                | st.integers(min_value=10, max_value=5000).map(lambda n: f"@@DEEP{n}@@")
            )
            parent[path[-1]] = new
        except (KeyError, IndexError, TypeError):
            continue
    text = json.dumps(doc)
    # deeply nested values are spliced in as text (the test's own serializer would recurse)
    text = re.sub(r'"@@DEEP(\d+)@@"', lambda m: "[" * int(m.group(1)) + "]" * int(m.group(1)), text)
    raw = text.encode()
    manifest, problems = schema_problems(raw)
    assert (manifest is None) == bool(problems)
    try:
        load_manifest(raw)
    except BundleError:
        pass


@SETTINGS
@given(st.text(max_size=40))
def test_shard_specs_parse_or_say_why(spec: str) -> None:
    try:
        i, n = parse_shard(spec)
    except PlanError as exc:
        assert exc.message
    else:
        assert 1 <= i <= n <= limits.MAX_SHARDS
        assert spec.strip().isascii()
