"""Path globs of a scope's ``isolation`` section, and the class of a changed path under them.

Layer 1 (part of the scope): the isolation check classifies a diff's paths with :func:`classify`, and
verifying a bundle reclassifies the paths it recorded by the same rule and the judging scope's globs.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Literal

from fasttrack.limits import GLOB_MAX_CHARS

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.scope.inputs import IsolationSpec

Classification = Literal["owned", "shared", "elsewhere"]
"""Where a changed path lies: in the optimization's own paths, in a shared component, or elsewhere."""


class Glob:
    """A path glob compiled to a matcher that runs in time linear in the path's length.

    ``**`` spans folders, ``*`` and ``?`` do not, ``**/`` also matches no folder at all;
    every other character is itself. The glob is a chain of states (one per token), run
    as a set of active states held in the bits of one integer (a bit-parallel NFA): each
    character of the path costs a few integer operations, whatever the glob, so no glob
    backtracks (``************Z`` against a long path is as fast as ``*Z``). Runs of
    stars collapse to one and repeated ``**/`` to one, which keeps the chains of empty
    moves short. A glob longer than :data:`fasttrack.limits.GLOB_MAX_CHARS` is refused.
    """

    __slots__ = ("_accept", "_by_char", "_any1", "_star", "_dstar", "_skip1", "_skip3", "text")

    def __init__(self, glob: str) -> None:
        if len(glob) > GLOB_MAX_CHARS:
            raise ValueError(f"glob {glob[:60]!r}... is {len(glob)} characters, over the limit of {GLOB_MAX_CHARS}")
        self.text = glob
        # tokens: one character, "?", "*" (no slash), "**" (anything), and "(" opening a "**/" group ("(", "**",
        # "/"): a state that consumes nothing and moves on into the group or past all of it
        tokens: list[str] = []
        i = 0
        while i < len(glob):
            if glob.startswith("**/", i):
                if tokens[-3:] != ["(", "**", "/"]:  # **/**/ is **/
                    tokens += ["(", "**", "/"]
                i += 3
            elif glob[i] == "*":
                stars = "**" if glob.startswith("**", i) else "*"
                i += len(stars)
                if tokens and tokens[-1] in ("*", "**") and tokens[-2:-1] != ["("]:
                    tokens[-1] = "**" if "**" in (stars, tokens[-1]) else "*"  # a run of stars is one star
                else:
                    tokens.append(stars)
            else:
                tokens.append(glob[i])
                i += 1
        self._accept = 1 << len(tokens)
        by_char: dict[str, int] = {}
        any1 = star = dstar = skip1 = skip3 = 0
        for n, tok in enumerate(tokens):
            bit = 1 << n
            if tok == "?":
                any1 |= bit
            elif tok == "*":
                star |= bit
                skip1 |= bit
            elif tok == "**":
                dstar |= bit
                skip1 |= bit
            elif tok == "(":
                skip1 |= bit
                skip3 |= bit
            else:
                by_char[tok] = by_char.get(tok, 0) | bit
        self._by_char, self._any1, self._star, self._dstar = by_char, any1, star, dstar
        self._skip1, self._skip3 = skip1, skip3

    def _closure(self, s: int) -> int:
        while True:
            t = s | ((s & self._skip1) << 1) | ((s & self._skip3) << 3)
            if t == s:
                return s
            s = t

    def match(self, path: str) -> bool:
        """Whether the whole of ``path`` matches."""
        s = self._closure(1)
        by_char, any1, star, dstar = self._by_char, self._any1, self._star, self._dstar
        for ch in path:
            if ch == "/":
                s = ((s & by_char.get(ch, 0)) << 1) | (s & dstar)
            else:
                s = ((s & (by_char.get(ch, 0) | any1)) << 1) | (s & (star | dstar))
            if not s:
                return False
            s = self._closure(s)
        return bool(s & self._accept)


@lru_cache(maxsize=1024)
def compile_glob(glob: str) -> Glob:
    """The compiled matcher of ``glob`` (cached)."""
    return Glob(glob)


def glob_match(path: str, glob: str) -> bool:
    return compile_glob(glob.lstrip("/")).match(path)


def classify(path: str, spec: IsolationSpec) -> tuple[Classification, str | None, str | None]:
    """(classification, component, matched glob). Shared components win over ownership:
    an owned glob can never make an off-limits file acceptable."""
    for comp, globs in spec.shared_components.items():
        for g in globs:
            if glob_match(path, g):
                return "shared", comp, g
    for g in spec.owned_paths:
        if glob_match(path, g):
            return "owned", None, g
    for g in spec.allowed_paths:
        if glob_match(path, g):
            return "elsewhere", None, g
    return "elsewhere", None, None
