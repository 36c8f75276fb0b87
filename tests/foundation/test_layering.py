"""The import graph of ``fasttrack/`` follows the layering the README states.

The graph is built statically: every module under ``fasttrack/`` is parsed with ``ast``
and every ``import`` / ``from ... import`` statement anywhere in it counts as an edge,
at module level, inside functions and classes, under ``try`` and under
``if TYPE_CHECKING:``. TYPE_CHECKING-only imports count like any other: they are not run,
but they are still a dependency of the code on the imported module, and a cycle or an
upward edge through type hints is the same design problem (it is broken with a protocol
or a neutral module, not hidden behind TYPE_CHECKING).

An edge goes to the module named: ``from a.b import c`` is an edge to ``a.b.c`` when that
is a module, else to ``a.b``; relative imports are resolved. The packages that Python runs
on the way to a submodule (``import a.b.c`` also runs ``a`` and ``a.b``) are not edges:
every package ``__init__`` is a module of the graph with its own edges, and a package
holding its own submodules is not a cycle. Imports by name string
(``importlib.import_module``) are not seen.

The layers, bottom to top (a module imports only from its own layer or below), are
:data:`LEVELS`; README's ``| level | modules |`` table is generated from them and from the
components the graph finds (:func:`layer_table`), and a test fails with the diff when the
README says otherwise (``python tests/foundation/test_layering.py`` writes it).

Every test lists all violations with module names, not just the first.
"""

from __future__ import annotations

import ast
import difflib
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from fasttrack import ROOT

PKG = ROOT / "fasttrack"

#: Layer of each top-level component of ``fasttrack`` (see the module docstring); a dotted key (``host.doctor``) is a
#: module or subpackage of a component that sits on a layer of its own (the rest of its component imports none of it).
LEVELS: dict[str, float] = {
    "fasttrack": 1,  # the package root: ROOT, __version__ and lazy_exports; imports nothing of fasttrack
    "errors": 1,
    "registry": 1,  # one registry of pluggable parts by kind and name (built-ins and the fasttrack entry points)
    "results": 1,
    "limits": 1,  # every resource limit on untrusted input (bundles, scopes, key files, shards)
    "evidence": 1,  # typed result rows per check table and the rules that re-judge them (the registry's evidence)
    "terminal": 1,  # the consoles commands print to: full width without a terminal
    "modelbase": 1,  # the pydantic bases of the records: strict, and strict with docstrings as descriptions
    "scope": 1,
    "stats": 1,
    "bundle": 1.5,
    "report": 1.7,
    "engine": 2,
    "planning": 2,  # the plan (points, engine groups, shards) and what it costs (the checks' own cost declarations)
    "change": 2,  # the change under test: a git diff's paths classified against owned paths and shared components
    "host": 2,  # this host's hardware, whether the scope's engines fit it, the model to serve
    "inputs": 2,
    "perf": 3,
    "evals": 3,
    "kernels": 3,
    "checks": 4,
    "pipeline": 5,
    "executors": 5,
    "host.doctor": 5,  # the preflight: hardware, engine interpreter, arguments, passability (no engine started)
    "schemas": 5,  # the checked-in JSON Schemas: the scope's lists every registered check's gate and feature
    "pr": 5,  # the PR flow (GitHub client, publish, sticky comment): imports bundle/, report/, level 1
    "cli": 6,
    "__main__": 6,
}

#: Components that may import less than their level allows: component -> (the components it may import beyond
#: its own, how README's layer table says it).
ONLY: dict[str, tuple[frozenset[str], str]] = {
    "bundle": (frozenset(c for c, lv in LEVELS.items() if lv == 1), "level 1 and its own modules only"),
    "report": (frozenset({"bundle"} | {c for c, lv in LEVELS.items() if lv == 1}), "`bundle/` and level 1 only"),
}

#: Edges that break the layering on purpose, each with its reason. Keep this short (it is empty).
ALLOWED: dict[tuple[str, str], str] = {}

#: Components that must never import ``fasttrack.checks`` (issue: results layer).
NO_CHECKS = ("bundle", "report", "engine", "perf", "stats", "kernels")


# --------------------------------------------------------------------------- the graph


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py")) if "__pycache__" not in p.parts}


def _imports(tree: ast.AST, name: str, is_pkg: bool) -> Iterator[tuple[str, list[str], int]]:
    """``(module, names, line)`` for every import statement (relative ones resolved)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            yield mod, [a.name for a in node.names], node.lineno


@functools.lru_cache(maxsize=1)
def graph() -> dict[str, dict[str, int]]:
    """``{module: {imported fasttrack module: first line}}`` over every module (built once per session)."""
    mods = modules()
    out: dict[str, dict[str, int]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: dict[str, int] = {}
        for mod, names, line in _imports(tree, name, path.name == "__init__.py"):
            if mod != "fasttrack" and not mod.startswith("fasttrack."):
                continue
            targets = [f"{mod}.{n}" for n in names if f"{mod}.{n}" in mods]
            if len(targets) < len(names) or not names:
                targets.append(mod)
            for t in targets:
                while t not in mods and "." in t:  # ``import a.b.c`` of a name that is not a module
                    t = t.rsplit(".", 1)[0]
                if t != name:
                    edges.setdefault(t, line)
        out[name] = edges
    return out


def component(module: str) -> str:
    """The component of a module: its top-level package or module under ``fasttrack`` (``fasttrack.a.b`` -> ``a``),
    or the dotted key of :data:`LEVELS` it falls under (``fasttrack.host.doctor`` -> ``host.doctor``)."""
    parts = module.split(".")
    for n in range(len(parts), 2, -1):
        key = ".".join(parts[1:n])
        if key in LEVELS:
            return key
    return parts[1] if len(parts) > 1 else parts[0]


def cycles(g: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(out)


def _cycle_path(g: dict[str, dict[str, int]], comp: list[str]) -> str:
    """One concrete loop inside a strongly connected component, with line numbers."""
    members = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(g[v]):
                if w in members and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        if start in prev:
            break
        frontier = nxt
    path = [start]
    v = prev[start]
    while v != start:
        path.append(v)
        v = prev[v]
    path.append(start)
    path.reverse()
    return " -> ".join(f"{a} (line {g[a][b]})" for a, b in zip(path, path[1:], strict=False)) + f" -> {start}"


def edges_from(components: tuple[str, ...]) -> Iterator[tuple[str, str, int]]:
    for src, dst in sorted(graph().items()):
        if component(src) in components:
            for d, line in sorted(dst.items()):
                yield src, d, line


def layering_violations(g: dict[str, dict[str, int]]) -> list[str]:
    bad = []
    for src, dsts in sorted(g.items()):
        lsrc = LEVELS.get(component(src))
        if lsrc is None:
            bad.append(f"{src}: its component {component(src)!r} has no layer in LEVELS")
            continue
        for dst, line in sorted(dsts.items()):
            ldst = LEVELS.get(component(dst))
            if ldst is None or ldst > lsrc:
                if (src, dst) in ALLOWED:
                    continue
                where = "no layer" if ldst is None else f"layer {ldst:g}"
                bad.append(f"{src} (layer {lsrc:g}) imports {dst} ({where}) at line {line}")
    return bad


# --------------------------------------------------------------------------- tests


def test_the_graph_sees_every_kind_of_import() -> None:
    g = graph()
    assert len(g) > 50
    # module level, relative to nothing
    assert "fasttrack.results" in g["fasttrack.bundle.manifest"]
    # inside a function (a lazy import)
    assert "fasttrack.bundle.verify" in g["fasttrack.bundle.cli"]
    # under TYPE_CHECKING
    assert "fasttrack.bundle.writer" in g["fasttrack.bundle"]
    # ``from fasttrack import ROOT`` is an edge to the package root
    assert "fasttrack" in g["fasttrack.report.render"]


def test_cycle_finder_finds_a_planted_cycle() -> None:
    g = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert cycles(g) == [["a", "b", "c"]]
    assert _cycle_path(g, ["a", "b", "c"]) == "a (line 1) -> b (line 2) -> c (line 3) -> a"


def test_no_import_cycles() -> None:
    g = graph()
    found = cycles(g)
    assert not found, "import cycles inside fasttrack/:\n" + "\n".join(
        f"{', '.join(c)}\n    e.g. {_cycle_path(g, c)}" for c in found
    )


@pytest.mark.parametrize("comp", NO_CHECKS)
def test_never_imports_checks(comp: str) -> None:
    bad = [f"{s} imports {d} at line {n}" for s, d, n in edges_from((comp,)) if component(d) == "checks"]
    assert not bad, f"fasttrack.{comp} must not import fasttrack.checks:\n" + "\n".join(bad)


@pytest.mark.parametrize("comp", sorted(ONLY))
def test_restricted_components_import_only_what_the_table_says(comp: str) -> None:
    allowed, said = ONLY[comp]
    bad = [
        f"{s} imports {d} at line {n}"
        for s, d, n in edges_from((comp,))
        if component(d) not in allowed | {comp} and (s, d) not in ALLOWED
    ]
    assert not bad, f"fasttrack.{comp} may import only {said}:\n" + "\n".join(bad)


def test_layering_rule_finds_planted_violations() -> None:
    g = {
        "fasttrack.engine.client": {"fasttrack.checks.base": 3, "fasttrack.results": 4},
        "fasttrack.bundle.verify": {"fasttrack.report.load": 5, "fasttrack.bundle.dsse": 6},
        "fasttrack.cli": {"fasttrack.pipeline": 8},
        "fasttrack.newthing": {},
    }
    assert layering_violations(g) == [
        "fasttrack.bundle.verify (layer 1.5) imports fasttrack.report.load (layer 1.7) at line 5",
        "fasttrack.engine.client (layer 2) imports fasttrack.checks.base (layer 4) at line 3",
        "fasttrack.newthing: its component 'newthing' has no layer in LEVELS",
    ]


def test_layering_table_holds() -> None:
    bad = layering_violations(graph())
    assert not bad, "imports against the layering (a module imports only its own layer or below):\n" + "\n".join(bad)


def test_allow_list_is_not_stale() -> None:
    g = graph()
    stale = [f"{s} -> {d}" for s, d in ALLOWED if d not in g.get(s, {})]
    assert not stale, "ALLOWED lists edges that no longer exist; remove them:\n" + "\n".join(stale)


# --------------------------------------------------------------------------- README's layer table

#: Components the table leaves out: the package root and ``python -m fasttrack``.
NOT_IN_TABLE = ("fasttrack", "__main__")


def components() -> list[str]:
    """Every component the import graph finds, in the order of :data:`LEVELS` (unknown ones last, by name)."""
    found = {component(m) for m in graph()}
    return sorted(found, key=lambda c: (list(LEVELS).index(c) if c in LEVELS else len(LEVELS), c))


def layer_table() -> str:
    """README's ``| level | modules |`` table: every component of the graph at its level, packages with a slash,
    and what a restricted component may import (:data:`ONLY`)."""
    rows: dict[float, list[str]] = {}
    for c in components():
        if c in NOT_IN_TABLE:
            continue
        level = LEVELS.get(c)
        assert level is not None, f"fasttrack.{c} has no layer in LEVELS; give it one (and rerun this test)"
        path = c.replace(".", "/")
        name = f"`{path}/`" if (PKG / path).is_dir() else f"`{path}`"
        if c in ONLY:
            name += f" ({ONLY[c][1]})"
        rows.setdefault(level, []).append(name)
    lines = ["| level | modules |", "|---|---|"]
    lines += [f"| {level:g} | {', '.join(names)} |" for level, names in sorted(rows.items())]
    return "\n".join(lines) + "\n"


def readme_layer_table(text: str) -> str:
    """The ``| level | modules |`` table of README.md as written."""
    m = re.search(r"^\| level \| modules \|\n(?:\|.*\|\n)+", text, flags=re.M)
    assert m, "README.md has no '| level | modules |' table"
    return m.group(0)


def test_readme_layer_table_is_the_import_graphs() -> None:
    written = readme_layer_table((ROOT / "README.md").read_text(encoding="utf-8"))
    want = layer_table()
    diff = "".join(
        difflib.unified_diff(written.splitlines(True), want.splitlines(True), "README.md (as written)", "generated")
    )
    assert written == want, f"README's layer table differs from LEVELS and the import graph:\n{diff}"


def test_the_table_generator_places_every_component() -> None:
    table = layer_table()
    for c in components():
        if c not in NOT_IN_TABLE:
            assert f"`{c.replace('.', '/')}" in table, c
    # a stated restriction goes with its component; the levels are in order
    assert "`bundle/` (level 1 and its own modules only)" in table
    levels = [float(line.split("|")[1]) for line in table.splitlines()[2:]]
    assert levels == sorted(levels) and len(levels) == len(set(levels))


# --------------------------------------------------------------------------- README's module table


def readme_roles(text: str) -> str:
    """The ``| module | role |`` table of README.md as written."""
    m = re.search(r"^\| module \| role \|\n(?:\|.*\|\n)+", text, flags=re.M)
    assert m, "README.md has no '| module | role |' table"
    return m.group(0)


def test_readme_names_every_package_and_module_by_its_role() -> None:
    """Every component the import graph finds has a row in README's architecture table (``fasttrack/x/`` for a
    package, ``fasttrack/x.py`` for a module)."""
    roles = readme_roles((ROOT / "README.md").read_text(encoding="utf-8"))
    missing = [
        c
        for c in components()
        if c not in NOT_IN_TABLE
        and f"`fasttrack/{c.replace('.', '/')}/`" not in roles
        and f"`fasttrack/{c.replace('.', '/')}.py`" not in roles
    ]
    assert not missing, f"README's '| module | role |' table has no row for: {', '.join(missing)}"


if __name__ == "__main__":  # python tests/foundation/test_layering.py: write the generated table into README.md
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    readme.write_text(text.replace(readme_layer_table(text), layer_table()), encoding="utf-8")
    print(layer_table(), end="")
