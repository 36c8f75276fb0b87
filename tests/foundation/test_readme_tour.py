"""README's CLI tour cannot drift: every command it shows exists, takes every option the tour gives it and
no more positional arguments than it accepts, and its ``--help`` runs; the tour's cheap commands (``plan``,
``schemas --check``) run for real."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from fasttrack import ROOT

README = ROOT / "README.md"


def tour_lines() -> list[str]:
    """The commands of README's ``## CLI tour`` code block, comments removed."""
    text = README.read_text()
    section = text[text.index("## CLI tour") :]
    block = section[section.index("```bash") + len("```bash") : section.index("```", section.index("```bash") + 7)]
    out = []
    for line in block.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        if line.startswith("fasttrack "):
            out.append(line)
    return out


def cli_root() -> Any:
    from fasttrack.cli import _register_subcommands, app

    _register_subcommands()
    return typer.main.get_command(app)


def resolve(tokens: list[str]) -> tuple[Any, list[str], list[str]]:
    """(the command the tokens name, the command path, the remaining tokens)."""
    cmd = cli_root()
    path: list[str] = []
    rest = list(tokens)
    while rest and hasattr(cmd, "commands") and rest[0] in cmd.commands:
        path.append(rest[0])
        cmd = cmd.commands[rest.pop(0)]
    return cmd, path, rest


def test_the_tour_has_the_commands_it_should() -> None:
    lines = tour_lines()
    assert len(lines) >= 20
    firsts = {shlex.split(x)[1] for x in lines}
    assert {"plan", "doctor", "isolation", "validate", "verify", "report", "merge", "reproduce", "dashboard"} <= firsts
    assert any("--trusted-scope" in x for x in lines)


@pytest.mark.parametrize("line", tour_lines())
def test_every_tour_command_and_option_exists(line: str) -> None:
    tokens = shlex.split(line)[1:]
    cmd, path, rest = resolve(tokens)
    assert path, f"no such command: {line}"
    assert not hasattr(cmd, "commands") or cmd.invoke_without_command, f"{line}: names a group, not a command"
    # typer may carry its own copy of click: parameters are told apart by their type name
    options = [p for p in cmd.params if type(p).__name__.endswith("Option")]
    opts = {o for p in options for o in (*p.opts, *p.secondary_opts)}
    flags = {o for p in options if (p.is_flag or p.count) for o in p.opts}
    args = [p for p in cmd.params if type(p).__name__.endswith("Argument")]
    positional = 0
    i = 0
    while i < len(rest):
        tok = rest[i]
        if tok.startswith("-"):
            name = tok.split("=", 1)[0]
            assert name in opts, f"{line}: {' '.join(path)} has no option {name} (it has {sorted(opts)})"
            i += 1 if (name in flags or "=" in tok) else 2
            continue
        positional += 1
        i += 1
    nargs = sum(-1 if a.nargs == -1 else a.nargs for a in args)
    assert nargs < 0 or positional <= nargs, f"{line}: {positional} positional arguments, the command takes {nargs}"
    required = [a for a in args if a.required]
    assert positional >= len(required), f"{line}: missing {[a.name for a in required][positional:]}"
    # and its --help runs
    from fasttrack.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exc:
        main([*path, "--help"])
    assert exc.value.code == 0 and "Usage" in out.getvalue()


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "--model", "kimi-k3", "--tier", "full", "--shard", "2/3", "--json"],
        ["plan", "--model", "glm-5.3"],
        ["schemas", "--check"],
    ],
)
def test_the_cheap_tour_commands_run(args: list[str], tmp_path: Path) -> None:
    lines = [shlex.split(x)[1:] for x in tour_lines()]
    assert any(x[: len(args)] == args or x == args for x in lines), f"not in the tour: {args}"
    from fasttrack.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exc:
        main([*args, "--no-arg-check"] if args[0] == "plan" else args)
    want = 2 if args == ["plan", "--model", "glm-5.3"] else 0  # a partial scope: says what is missing
    assert exc.value.code == want, out.getvalue() + err.getvalue()
