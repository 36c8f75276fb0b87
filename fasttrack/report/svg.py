"""A tiny SVG builder that escapes everything it is given.

Charts are drawn in Python and inlined into the report as ``<svg>`` markup. Bundle text
(point ids, metric names, series labels) reaches the SVG only through this module: text
nodes and attribute values are always escaped, attribute names must be plain identifiers
chosen by the code, and numbers are formatted here. No element can carry an event
handler, a ``style`` attribute or a link: the allowed tags and attributes are listed below.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from markupsafe import Markup

#: Tags a chart may use (nothing that loads, links or scripts).
ALLOWED_TAGS = frozenset(
    {"svg", "g", "line", "rect", "circle", "path", "polyline", "polygon", "text", "title", "desc", "tspan"}
)
#: Attributes a chart may set (no ``on*``, ``href``, ``style``).
ALLOWED_ATTRS = frozenset(
    {
        "viewBox",
        "width",
        "height",
        "x",
        "y",
        "x1",
        "y1",
        "x2",
        "y2",
        "cx",
        "cy",
        "r",
        "d",
        "points",
        "class",
        "role",
        "aria-label",
        "aria-hidden",
        "text-anchor",
        "dominant-baseline",
        "transform",
        "fill",
        "stroke",
        "stroke-width",
        "stroke-dasharray",
        "opacity",
        "font-size",
        "rx",
        "xmlns",
        "preserveAspectRatio",
        "focusable",
        "dx",
        "dy",
    }
)
_CLASS_RE = re.compile(r"^[A-Za-z0-9_ -]*$")
#: What markupsafe's ``escape`` replaces, and with what (as one translation table: charts render many
#: small strings, and this is several times cheaper than a Markup object per string).
_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;"})


def num(v: float) -> str:
    """A coordinate: finite, at most 2 decimals, no exponent."""
    if not math.isfinite(v):
        raise ValueError(f"SVG coordinate must be finite, got {v!r}")
    s = f"{v:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


class El:
    """One SVG element; children are elements or text (escaped on output)."""

    __slots__ = ("tag", "attrs", "children")

    def __init__(self, tag: str, attrs: dict[str, object] | None = None, *children: "El | str") -> None:
        if tag not in ALLOWED_TAGS:
            raise ValueError(f"SVG tag {tag!r} is not allowed in charts")
        self.tag = tag
        self.attrs: dict[str, str] = {}
        if attrs:
            for k, v in attrs.items():  # what ``set`` does, without a call per attribute
                if k not in ALLOWED_ATTRS:
                    raise ValueError(f"SVG attribute {k!r} is not allowed in charts")
                if k == "class" and not _CLASS_RE.match(str(v)):
                    raise ValueError(f"class {v!r} must be plain words")
                self.attrs[k] = num(v) if isinstance(v, float) else str(v)
        self.children: list[El | str] = list(children)

    def set(self, key: str, value: object) -> "El":
        if key not in ALLOWED_ATTRS:
            raise ValueError(f"SVG attribute {key!r} is not allowed in charts")
        if key == "class" and not _CLASS_RE.match(str(value)):
            raise ValueError(f"class {value!r} must be plain words")
        self.attrs[key] = num(value) if isinstance(value, float) else str(value)
        return self

    def add(self, *children: "El | str") -> "El":
        self.children.extend(children)
        return self

    def render(self) -> str:
        attrs = "".join([f' {k}="{v.translate(_ESCAPES)}"' for k, v in self.attrs.items()])
        if not self.children:
            return f"<{self.tag}{attrs}/>"
        inner = "".join(
            [
                c.render() if isinstance(c, El) else (str(c) if isinstance(c, Markup) else str(c).translate(_ESCAPES))
                for c in self.children
            ]
        )
        return f"<{self.tag}{attrs}>{inner}</{self.tag}>"

    def markup(self) -> Markup:
        """The element as trusted markup (everything inside was escaped here)."""
        return Markup(self.render())


def svg(width: float, height: float, *, label: str, cls: str = "chart") -> El:
    """A root ``<svg>`` with an accessible label (the label is escaped)."""
    return El(
        "svg",
        {
            "xmlns": "http://www.w3.org/2000/svg",
            "viewBox": f"0 0 {num(width)} {num(height)}",
            "width": num(width),
            "height": num(height),
            "role": "img",
            "aria-label": label,
            "class": cls,
            "focusable": "false",
        },
        El("title", None, label),
    )


def text(
    x: float,
    y: float,
    s: str,
    *,
    anchor: str = "start",
    cls: str = "",
    size: float | None = None,
    transform: str | None = None,
) -> El:
    attrs: dict[str, object] = {"x": num(x), "y": num(y), "text-anchor": anchor}
    if cls:
        attrs["class"] = cls
    if size:
        attrs["font-size"] = num(size)
    if transform:
        attrs["transform"] = transform
    return El("text", attrs, s)


def line(x1: float, y1: float, x2: float, y2: float, *, cls: str = "", dash: str | None = None) -> El:
    attrs: dict[str, object] = {"x1": num(x1), "y1": num(y1), "x2": num(x2), "y2": num(y2)}
    if cls:
        attrs["class"] = cls
    if dash:
        attrs["stroke-dasharray"] = dash
    return El("line", attrs)


def polyline(points: Iterable[tuple[float, float]], *, cls: str = "") -> El:
    pts = " ".join(f"{num(x)},{num(y)}" for x, y in points)
    return El("polyline", {"points": pts, "class": cls or "series", "fill": "none"})


@dataclass(frozen=True)
class PlotArea:
    """A chart's size and margins (left, right, top, bottom); the plot area is what the margins leave."""

    W: int
    H: int
    ml: int
    mr: int
    mt: int
    mb: int

    @property
    def pw(self) -> int:
        return self.W - self.ml - self.mr

    @property
    def ph(self) -> int:
        return self.H - self.mt - self.mb
