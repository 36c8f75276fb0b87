"""The typed evidence of a check: its result rows as declared models, and the rule that re-judges them.

Every table a check writes into a bundle is a list of rows of one :class:`Row` model: strict types (no
number given as text, no text as a boolean), no undeclared field, and each verdict field a closed
allow-list (``Literal``). A check declares its tables with :class:`TableSpec` and its re-judging rule in
one :class:`CheckEvidence`, registered under the registry kind ``evidence`` by the check's name.

The re-judging rule (:attr:`CheckEvidence.rejudge`) reads the decoded rows and the gate of the scope the
bundle is judged by (the trusted scope, else the bundle's own), recomputes each row's verdict from the
row's own numbers, and returns the findings (a row whose recorded verdict disagrees with the recomputed
one, a planned point without a row) and the best verdict the check could have: its **bound**. A check
recorded better than its bound (``pass`` next to a failing row, ``not_run`` next to a failed one) was
edited or judged by other rules than the ones that wrote it.

This module is layer 1 and light: it imports pydantic and the scope models only, so verifying and
rendering a bundle never load the checks, the engine code, httpx or scipy.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from fasttrack.errors import FasttrackError

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.evidence.expect import RejudgeContext

RowVerdict = Literal["pass", "fail", "not_run"]
"""The verdict of one row: the only three words a judged row may carry."""

VERDICT_ORDER: dict[str, int] = {"pass": 0, "not_run": 1, "inconclusive": 1, "not_exercised": 1, "fail": 2}
"""How bad a verdict is: a check may be recorded worse than its rows imply (a condition its rows do not show),
never better; an older bundle's row may be recorded worse than today's rule gives (a rule that changed since),
never better."""


class Row(BaseModel):
    """The base of every result row: strict types, no undeclared field, verdicts as allow-lists.

    ``KEY`` names the fields that say which row this is (point, workload, metric...), as findings name it.
    Non-finite floats are accepted (a relative error can be infinite); every rule treats a NaN as failing.
    """

    model_config = ConfigDict(
        strict=True, extra="forbid", use_attribute_docstrings=True, frozen=True, populate_by_name=True
    )

    KEY: ClassVar[tuple[str, ...]] = ()

    shard: str | None = None
    """The shard a merged bundle's row came from (``i/n``; a column only in a merged bundle's tables)."""

    def where(self) -> str:
        """The row in words: its key fields' values (``decode/tp1-b1/median_tpot_ms``)."""
        parts = [str(getattr(self, k)) for k in self.KEY if getattr(self, k, None) not in (None, "")]
        return "/".join(parts) or "?"

    def record(self) -> dict[str, Any]:
        """The row as the Parquet writer takes it: every declared field, in declaration order, by its column name
        (a field named after a pydantic attribute, such as ``schema_``, is written as its alias ``schema``)."""
        out = self.model_dump(mode="python", by_alias=True, exclude={"shard"})
        if self.shard is not None:
            out["shard"] = self.shard
        return out


@dataclass(frozen=True)
class Finding:
    """One thing re-judging found wrong, naming the check, the table and the row."""

    check: str
    table: str | None
    row: str | None
    """The row in words (:meth:`Row.where`, with its index), or None for a finding about the whole table."""
    message: str
    recorded: str | None = None
    """For a verdict that disagrees: the recorded verdict and the recomputed one."""
    expected: str | None = None

    @property
    def recorded_worse(self) -> bool:
        """Whether the recorded verdict is worse than the recomputed one (tolerated in an older bundle's table)."""
        r, e = self.recorded, self.expected
        return r in VERDICT_ORDER and e in VERDICT_ORDER and VERDICT_ORDER[r] > VERDICT_ORDER[e]

    def line(self) -> str:
        where = self.check + (f"/{self.table}" if self.table else "") + (f" row {self.row}" if self.row else "")
        return f"{where}: {self.message}"


@dataclass
class Rejudged:
    """What re-judging one check's tables found."""

    bound: str
    """The best verdict the rows allow the check (``pass``, ``not_run`` or ``fail``)."""
    findings: list[Finding] = field(default_factory=list)
    """Rows whose recorded verdict disagrees with the recomputed one (always wrong, whatever the check says)."""
    gaps: list[str] = field(default_factory=list)
    """What keeps the bound below pass besides failing rows (a planned point without a row, a missing gate):
    wrong only for a check recorded better than its bound."""
    notes: list[str] = field(default_factory=list)
    """What was re-judged and how, in words (e.g. 'the 8 gated rows against threshold 0.98')."""


RejudgeRule = Callable[[Mapping[str, Sequence[Row]], Any, "RejudgeContext"], Rejudged]
"""``rejudge(tables, gate, ctx)``: the rows by table name, the check's gate section of the judging scope (None
for a check without one), and what the judging scope and its plan expect."""


@dataclass(frozen=True)
class TableSpec:
    """One table of a check: its name, its row model and version, and the most rows its plan can produce."""

    name: str
    model: type[Row]
    max_rows: Callable[[RejudgeContext], int]
    """The most rows the judging scope's plan could have produced for this table (with headroom)."""
    version: int = 1
    required: bool = True
    """Whether a check that ran must write this table (a table of optional evidence need not exist)."""
    keep: tuple[str, ...] | None = None
    """The fields the re-judging rule reads (verifying keeps only these of each row, and the row's key fields);
    None: the rule does not read this table (verifying validates each row and keeps none)."""


@dataclass(frozen=True)
class CheckEvidence:
    """A check's evidence: its tables, and the rule that re-judges them."""

    check: str
    tables: tuple[TableSpec, ...]
    rejudge: RejudgeRule
    every_tier: bool = False
    """Whether the check runs in every tier, whatever the tier's ``checks`` list says (isolation)."""
    required_when: Callable[[RejudgeContext], bool] | None = None
    """Whether the bundle verdict depends on the check (default: whenever the tier runs it)."""
    needs_points: bool = True
    """Whether the check works on the plan's config points (an engine check): a shard bundle holding none of
    them does not require it (the other shards run it)."""

    def table(self, name: str) -> TableSpec | None:
        return next((t for t in self.tables if t.name == name), None)

    def model_name(self, table: str) -> str:
        """The name the manifest records for a table's model: ``<check>.<table>``."""
        return f"{self.check}.{table}"

    def required(self, ctx: RejudgeContext) -> bool:
        """Whether the judging scope's tier makes this check part of the verdict."""
        runs = self.every_tier or ctx.runs_check(self.check)
        if self.needs_points and ctx.shard != "1/1" and not ctx.points:
            return False
        return runs and (self.required_when is None or self.required_when(ctx))


# --------------------------------------------------------------------------- helpers for the rules


def worst(*verdicts: str) -> str:
    """The worst of ``verdicts`` (``fail`` > ``not_run`` > ``pass``); ``pass`` for none."""
    return max(verdicts, key=VERDICT_ORDER.__getitem__, default="pass")


def fold(verdicts: Iterable[str]) -> str:
    """A check's verdict over its items: any fail fails it, else any not run (or none at all) leaves it not run."""
    vs = list(verdicts)
    if not vs:
        return "not_run"
    return worst(*vs)


def at_least(value: float | None, bound: float) -> bool:
    """``value >= bound`` for a finite value (None and NaN never reach a bound)."""
    return value is not None and value == value and value >= bound


def at_most(value: float | None, bound: float) -> bool:
    """``value <= bound`` for a finite value (None and NaN never stay under a bound)."""
    return value is not None and value == value and value <= bound


class Checker:
    """Collects one check's findings while its rule walks the rows."""

    def __init__(self, check: str) -> None:
        self.check = check
        self.findings: list[Finding] = []
        self.gaps: list[str] = []

    def row(self, table: str, i: int, row: Row, message: str) -> None:
        self.findings.append(Finding(self.check, table, f"{i} ({row.where()})", message))

    def gap(self, table: str | None, message: str) -> None:
        """Something the check's rows do not show (it keeps the bound below pass)."""
        self.gaps.append(Finding(self.check, table, None, message).line())

    def verdict(self, table: str, i: int, row: Row, recorded: str | None, expected: str, why: str) -> None:
        """A finding when the recorded verdict is not the recomputed one."""
        if recorded != expected:
            message = f"recorded verdict {recorded!r}, the numbers give {expected!r} ({why})"
            self.findings.append(Finding(self.check, table, f"{i} ({row.where()})", message, recorded, expected))

    def done(self, bound: str, notes: Sequence[str] = ()) -> Rejudged:
        return Rejudged(bound=bound, findings=self.findings, gaps=self.gaps, notes=list(notes))


class UndeclaredRow(Row):
    """A row of a table no installed package declares a model for (read as it is: its fields are not checked)."""

    model_config = ConfigDict(extra="allow", strict=False)


def headroom(n: int, factor: int = 4, extra: int = 64) -> int:
    """A row bound with room: ``factor`` times what the plan counts, plus ``extra`` rows."""
    return max(0, n) * factor + extra


class RowModelError(FasttrackError):
    """A row a check wrote that does not fit its table's model (a bug in the check), naming the row and field."""

    exit_code = 1


def plain(value: Any) -> Any:
    """``value`` as the JSON-like Python a row model validates: enums as their values, numpy scalars as Python
    numbers, tuples as lists, paths as POSIX text, nested models as dicts."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, PurePath):
        return value.as_posix()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        return value.item()
    return value


def validated(model: type[Row], rows: Iterable[Mapping[str, Any] | Row], *, where: str) -> list[Row]:
    """``rows`` through ``model`` (a row already of the model is kept); one that does not fit is an error naming
    the table, the row and the field."""
    out: list[Row] = []
    for i, r in enumerate(rows):
        if isinstance(r, model):
            out.append(r)
            continue
        try:
            out.append(model.model_validate({str(k): plain(v) for k, v in dict(r).items()}))
        except ValidationError as exc:
            e = exc.errors(include_url=False)[0]
            loc = ".".join(str(p) for p in e.get("loc", ())) or "(row)"
            raise RowModelError(
                f"row {i} of {where} does not fit {model.__name__}: field {loc!r}: {e.get('msg')} "
                f"(got {repr(e.get('input'))[:80]})",
                hint="The check wrote a row its table's row model does not declare: add the field to the model in "
                "fasttrack/evidence/, or fix the row.",
            ) from None
    return out
