"""``fasttrack validate``'s options, declared once.

:class:`ValidateOptions` holds everything a run is asked to do. Each field that is a command-line option
carries its :class:`Flag` (names, help, how its words read) as metadata, and everything else reads that one
declaration:

* the ``validate`` command's options are generated from it (:func:`typer_options`), and
  :meth:`ValidateOptions.from_cli` builds the options from what the command line gave;
* :meth:`ValidateOptions.to_argv` writes them back as a ``fasttrack validate`` command line: the Slurm scripts
  and the Kubernetes pods run every shard with it (:mod:`fasttrack.executors.shards`);
* the other commands that take one of these options (``slurm``, ``k8s``, their ``merge``) declare it with
  :func:`option`, so ``--sign-key`` (repeatable: every key signs), ``--tier`` or ``--repo`` mean the same
  everywhere.

This module imports no engine and no check: the executors' command lines read it.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from fasttrack.errors import FasttrackError

Words = Literal["value", "switch", "repeat", "comma", "pairs"]
"""How an option's words read: ``value`` (``--tier full``), ``switch`` (``--force``), ``repeat`` (``--sign-key A
--sign-key B``), ``comma`` (``--checks a,b``: a list), ``pairs`` (``--eval-data NAME=PATH``, repeated: a mapping; its
values are paths when the field maps names to paths, else strings)."""


@dataclass(frozen=True)
class Flag:
    """A field's command-line option: its names (the long one first), its help, how its words read."""

    names: tuple[str, ...]
    help: str
    words: Words = "value"
    always: bool = False
    """Written on every command line :meth:`ValidateOptions.to_argv` writes, even at its default (what a shard's
    command line runs is read off it: its scope and tier)."""
    example: str = ""
    """``pairs``: an example of one pair (``aime25=data/aime25.jsonl``), for the error on a malformed one."""

    @property
    def long(self) -> str:
        return self.names[0]


def flag(*names: str, help: str, words: Words = "value", always: bool = False, example: str = "") -> Flag:
    return Flag(names, help, words, always, example)


PR_PATTERN = r"([\w.-]+/[\w.-]+)#(\d+)"


@dataclass
class ValidateOptions:
    """Everything ``fasttrack validate`` was asked to do (the order of the fields is the order of the options on a
    command line :meth:`to_argv` writes, and in ``fasttrack validate --help``)."""

    model: Annotated[str, flag("--model", "-m", help="Suite name or path to a scope.yaml.", always=True)]
    tier: Annotated[str, flag("--tier", "-t", help="smoke < standard < full.", always=True)] = "smoke"
    shard: Annotated[str | None, flag("--shard", help="Run only shard i of n, e.g. 2/3.")] = None
    out: Annotated[Path, flag("--out", "-o", help="Run folder (the bundle is written here).")] = Path("runs/latest")
    force: Annotated[bool, flag("--force", help="Replace a non-empty --out folder.", words="switch")] = False
    sign_keys: Annotated[
        list[Path],
        flag(
            "--sign-key",
            help="Ed25519 private key (PEM or OpenSSH) that signs the bundle; repeatable (every key signs).",
            words="repeat",
        ),
    ] = field(default_factory=list)
    repo: Annotated[
        Path | None, flag("--repo", help="Git repository of the change, for the isolation check and PR link.")
    ] = None
    base: Annotated[str | None, flag("--base", help="Base ref of the change.")] = None
    head: Annotated[str | None, flag("--head", help="Head ref of the change (the PR head that was tested).")] = None
    pr: Annotated[str | None, flag("--pr", help="PR as OWNER/REPO#NUMBER (e.g. vllm-project/vllm#61868).")] = None
    checks: Annotated[
        list[str] | None, flag("--checks", help="Comma-separated subset of checks to run.", words="comma")
    ] = None
    groups: Annotated[
        list[str] | None,
        flag(
            "--group",
            help="Comma-separated engine groups to start (ids as 'fasttrack plan' lists them); the other groups' "
            "points are not exercised, so the bundle cannot pass.",
            words="comma",
        ),
    ] = None
    """Engine groups to start (None: every group of the plan). The plan stays whole: the points of the other groups
    are simply not exercised, which the checks that look at every in-tier point report."""
    allow_hardware_mismatch: Annotated[
        bool,
        flag(
            "--allow-hardware-mismatch",
            help="Run on a host that does not match the scope: a rehearsal, not evidence.",
            words="switch",
        ),
    ] = False
    baseline_url: Annotated[
        str | None, flag("--baseline-url", help="Use an already running baseline engine (not owned).")
    ] = None
    candidate_url: Annotated[
        str | None, flag("--candidate-url", help="Use an already running candidate engine (not owned).")
    ] = None
    reference_urls: Annotated[
        dict[str, str],
        flag(
            "--reference-url",
            help="NAME=URL: use an already running engine of the scope's reference variant NAME "
            "(gates.equivalence.reference.variants) instead of starting it (not owned); repeatable.",
            words="pairs",
            example="eager=http://127.0.0.1:8002",
        ),
    ] = field(default_factory=dict)
    """Attached reference variants, by name (:mod:`fasttrack.pipeline.variants`); a name the scope does not declare is
    an input error (:func:`fasttrack.pipeline.validate.check_reference_urls`)."""
    eval_data: Annotated[
        dict[str, Path],
        flag(
            "--eval-data",
            help="NAME=PATH: data file or folder for eval NAME instead of the scope's; repeatable.",
            words="pairs",
            example="aime25=data/aime25.jsonl",
        ),
    ] = field(default_factory=dict)
    run_anyway: Annotated[
        bool,
        flag(
            "--run-anyway",
            help="Run a tier that can never pass (see 'fasttrack plan'); the bundle is incomplete.",
            words="switch",
        ),
    ] = False
    launcher: Annotated[
        str | None,
        flag(
            "--launcher",
            help="How multi-node engines start their node processes: local (all on this host) or slurm (one srun "
            "task per node). Default: slurm inside a Slurm allocation of several nodes, else local.",
        ),
    ] = None
    scope_base_dir: Path | None = None
    """The folder the scope's relative paths start from, when not the scope file's own (``reproduce`` runs a
    bundle's recorded copy of a local suite's scope against that suite's files); not a command-line option."""

    def __post_init__(self) -> None:
        if self.pr is not None and not re.fullmatch(PR_PATTERN, self.pr.strip()):
            raise FasttrackError(
                f"--pr {self.pr!r} is not of the form OWNER/REPO#NUMBER.", hint="e.g. --pr vllm-project/vllm#61868"
            )

    @property
    def pr_repository(self) -> str | None:
        """The PR's repository (``OWNER/REPO`` of ``--pr``)."""
        m = re.fullmatch(PR_PATTERN, self.pr.strip()) if self.pr else None
        return m.group(1) if m else None

    @property
    def pr_number(self) -> int | None:
        """The PR's number (of ``--pr``)."""
        m = re.fullmatch(PR_PATTERN, self.pr.strip()) if self.pr else None
        return int(m.group(2)) if m else None

    @classmethod
    def from_cli(cls, **given: Any) -> ValidateOptions:
        """The options from what the command line gave (the words as typer read them, by field name)."""
        flags = flags_of(cls)
        paths = _path_fields(cls)
        values = {name: _from_words(flags[name], name in paths, v) for name, v in given.items() if name in flags}
        return cls(**values)

    def to_argv(self, *, only: tuple[str, ...] | None = None) -> list[str]:
        """The ``fasttrack validate`` arguments that give these options (those not at their default, and the scope
        and tier always), in the order of the fields; ``only``: just these fields."""
        out: list[str] = []
        for f in dataclasses.fields(self):
            fl = flags_of(type(self)).get(f.name)
            if fl is None or (only is not None and f.name not in only):
                continue
            value = getattr(self, f.name)
            if fl.always or value != _default(f):
                out += _to_words(fl, value)
        return out


_FLAGS: dict[type[Any], dict[str, Flag]] = {}


def flags_of(cls: type[Any]) -> dict[str, Flag]:
    """The command-line options of a dataclass: field name -> its :class:`Flag`, in field order."""
    if cls not in _FLAGS:
        hints = typing.get_type_hints(cls, include_extras=True)
        out: dict[str, Flag] = {}
        for f in dataclasses.fields(cls):
            meta = [m for m in getattr(hints[f.name], "__metadata__", ()) if isinstance(m, Flag)]
            if meta:
                out[f.name] = meta[0]
        _FLAGS[cls] = out
    return _FLAGS[cls]


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _to_words(fl: Flag, value: Any) -> list[str]:
    if fl.words == "switch":
        return [fl.long] if value else []
    if fl.words == "repeat":
        return [w for v in value for w in (fl.long, str(v))]
    if fl.words == "comma":
        return [fl.long, ",".join(value)]
    if fl.words == "pairs":
        return [w for k, v in value.items() for w in (fl.long, f"{k}={v}")]
    return [fl.long, str(value)]


def _path_fields(cls: type[Any]) -> frozenset[str]:
    """The fields of ``cls`` whose value is a path (or None)."""
    hints = typing.get_type_hints(cls)
    return frozenset(n for n, t in hints.items() if t is Path or Path in typing.get_args(t))


def _from_words(fl: Flag, path: bool, value: Any) -> Any:
    """A field's value from the command line's words (None or an empty list: not given)."""
    if fl.words == "switch":
        return bool(value)
    if fl.words == "repeat":
        return [Path(v) for v in value or []]
    if fl.words == "comma":
        got = [x.strip() for x in value.split(",") if x.strip()] if value else []
        return got or None
    if fl.words == "pairs":
        return _pairs(fl, value or [], path=path)
    if value is None:
        return None
    return Path(value) if path else value


def from_words(name: str, value: Any) -> Any:
    """``ValidateOptions.<name>`` from a command line's words, as ``validate`` reads them: for another command that
    declares the option with :func:`option` (``reproduce --reference-url``)."""
    return _from_words(flags_of(ValidateOptions)[name], name in _path_fields(ValidateOptions), value)


def _pairs(fl: Flag, items: list[str], *, path: bool) -> dict[str, Any]:
    """``--eval-data NAME=PATH`` (``--reference-url NAME=URL``) options as ``{name: path}`` (``{name: url}``)."""
    data: dict[str, Any] = {}
    form = "NAME=PATH" if path else "NAME=URL" if "://" in fl.example else "NAME=VALUE"
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise FasttrackError(f"{fl.long} {item!r} is not of the form {form}.", hint=f"e.g. {fl.long} {fl.example}")
        data[name.strip()] = Path(value.strip()) if path else value.strip()
    return data


# --------------------------------------------------------------------------- the typer options


def option(name: str, *, default: Any = dataclasses.MISSING, help: str | None = None) -> Any:
    """The typer option of ``ValidateOptions.<name>`` for a command's parameter (``default``: another default, e.g.
    None where the command has its own; ``help``: what it means for that command, when it says more)."""
    import typer

    fl = flags_of(ValidateOptions)[name]
    f = next(f for f in dataclasses.fields(ValidateOptions) if f.name == name)
    if default is dataclasses.MISSING:
        default = _cli_default(fl, f)
    return typer.Option(default, *fl.names, help=help or fl.help)


def _cli_default(fl: Flag, f: dataclasses.Field[Any]) -> Any:
    d = _default(f)
    if d is dataclasses.MISSING:
        return ...
    if fl.words in ("repeat", "pairs"):
        return None
    if fl.words == "comma":
        return None if d is None else ",".join(d)
    return str(d) if isinstance(d, Path) else d


def _cli_type(fl: Flag, required: bool) -> Any:
    if fl.words == "switch":
        return bool
    if fl.words in ("repeat", "pairs"):
        return typing.Optional[list[str]]  # noqa: UP045  (typer reads the annotation)
    return str if required else typing.Optional[str]  # noqa: UP045


def typer_options() -> list[Any]:
    """``inspect.Parameter`` objects for every option of :class:`ValidateOptions` (a command's signature: typer
    reads its options from it), by field name."""
    import inspect

    out = []
    for f in dataclasses.fields(ValidateOptions):
        fl = flags_of(ValidateOptions).get(f.name)
        if fl is None:
            continue
        required = _default(f) is dataclasses.MISSING
        out.append(
            inspect.Parameter(
                f.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=option(f.name),
                annotation=_cli_type(fl, required),
            )
        )
    return out
