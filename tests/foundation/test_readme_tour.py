"""README's CLI tour cannot drift: every command it shows exists, takes every option the tour gives it and
no more positional arguments than it accepts, and its ``--help`` runs; the tour's cheap commands (``plan``,
``schemas --check``) run for real."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest
from doc_testlib import check_command_line

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


def test_the_tour_has_the_commands_it_should() -> None:
    lines = tour_lines()
    assert len(lines) >= 20
    firsts = {shlex.split(x)[1] for x in lines}
    assert {"plan", "doctor", "isolation", "validate", "verify", "report", "merge", "reproduce", "dashboard"} <= firsts
    assert any("--trusted-scope" in x for x in lines)


@pytest.mark.parametrize("line", tour_lines())
def test_every_tour_command_and_option_exists(line: str) -> None:
    check_command_line(line)


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
