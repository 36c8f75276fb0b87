"""No function in ``fasttrack/`` runs over :data:`MAX_LINES` lines, except the listed ones, each with its reason.

A long function is split into named steps; the list below only shrinks: a function that is split must leave it
(the test says so), and a new long function needs a reason here. Lines count from ``def`` (decorators excluded)
to the function's last line; nested functions and methods are counted on their own and inside their parent.
"""

from __future__ import annotations

import ast

from fasttrack import ROOT

MAX_LINES = 80
PKG = ROOT / "fasttrack"

#: ``path:qualified name`` (path relative to fasttrack/) -> why it is longer than MAX_LINES.
EXCEPTIONS: dict[str, str] = {}


def function_lengths(tree: ast.AST, prefix: str = "") -> dict[str, int]:
    """``qualified name -> lines`` of every function in ``tree`` (methods as ``Class.method``, nested ones as
    ``outer.inner``)."""
    out: dict[str, int] = {}
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + node.name
            out[name] = (node.end_lineno or node.lineno) - node.lineno + 1
            out.update(function_lengths(node, name + "."))
        elif isinstance(node, ast.ClassDef):
            out.update(function_lengths(node, prefix + node.name + "."))
    return out


def long_functions() -> dict[str, int]:
    """Every function of fasttrack/ over MAX_LINES lines: ``path:name -> lines``."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        for name, n in function_lengths(ast.parse(path.read_text(encoding="utf-8"))).items():
            if n > MAX_LINES:
                out[f"{rel}:{name}"] = n
    return out


def test_the_counter_finds_long_functions_methods_and_nested_ones() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    src = (
        f"def long():\n{body}\n\n"
        "class C:\n    def m(self):\n        pass\n\n    async def a(self):\n        def inner():\n            pass\n"
    )
    got = function_lengths(ast.parse(src))
    assert got == {"long": MAX_LINES + 1, "C.m": 2, "C.a": 3, "C.a.inner": 2}


def test_no_function_is_longer_than_the_limit_without_a_reason() -> None:
    found = long_functions()
    new = {k: n for k, n in found.items() if k not in EXCEPTIONS}
    assert not new, (
        f"functions over {MAX_LINES} lines: split them into named steps, or give a reason in EXCEPTIONS:\n"
        + "\n".join(f"  {k}: {n} lines" for k, n in sorted(new.items(), key=lambda kv: -kv[1]))
    )


def test_every_exception_is_still_long_and_has_a_reason() -> None:
    found = long_functions()
    stale = sorted(k for k in EXCEPTIONS if k not in found)
    assert not stale, "split (or gone) since they were listed; remove them from EXCEPTIONS:\n  " + "\n  ".join(stale)
    assert all(reason.strip() for reason in EXCEPTIONS.values())
    for k in EXCEPTIONS:
        assert (PKG / k.split(":")[0]).is_file(), k
