"""Docs' examples as tests read them: the code blocks of a Markdown file, the ``fasttrack`` command lines of its
shell blocks (continuation lines joined, comments removed), and a check that a command line names a command that
exists and gives it only options it has and no more positional arguments than it takes."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer


def code_blocks(path: Path, lang: str) -> list[str]:
    """The bodies of the fenced blocks of ``path`` whose info string is ``lang`` ("" for a bare fence), in order."""
    out: list[str] = []
    body: list[str] | None = None
    keep = False
    for line in path.read_text().splitlines():
        if body is None and line.startswith("```"):
            body, keep = [], line[3:].strip() == lang
        elif body is not None and line.strip() == "```":
            if keep:
                out.append("\n".join(body) + "\n")
            body = None
        elif body is not None:
            body.append(line)
    return out


def command_lines(block: str, prefix: str = "fasttrack ") -> list[str]:
    """The lines of a shell block that start with ``prefix``, backslash continuations joined, comments removed,
    each ``<placeholder>`` one word."""
    joined = re.sub(r"\\\n\s*", " ", block)
    out = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        line = re.sub(r"<[^<>]*>", "PLACEHOLDER", line)  # a placeholder such as <PR head SHA> is one argument
        if line.startswith(prefix):
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


def check_command_line(line: str, *, run_help: bool = True) -> list[str]:
    """Assert that ``line`` (``fasttrack ...``) names an existing command with options it has and the positional
    arguments it takes, and (``run_help``) that the command's ``--help`` runs. Returns the command path."""
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
    if run_help:
        from fasttrack.cli import main

        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exc:
            main([*path, "--help"])
        assert exc.value.code == 0 and "Usage" in out.getvalue()
    return path


def run_cli(args: list[str]) -> tuple[int, str]:
    """Run ``fasttrack ARGS`` in this process: (exit code, stdout and stderr)."""
    from fasttrack.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), pytest.raises(SystemExit) as exc:
        main(args)
    return int(exc.value.code or 0), out.getvalue()
