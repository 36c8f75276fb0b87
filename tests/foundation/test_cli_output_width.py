"""Without a terminal (a pipe, a file) tables are printed whole: no cell cut to an ellipsis or folded at 80
columns, whatever $COLUMNS says; --json stays the machine interface."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fasttrack import ROOT
from fasttrack.terminal import PIPE_WIDTH, console


def piped(*args: str, columns: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["NO_COLOR"] = "1"
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run(
        [sys.executable, "-m", "fasttrack", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )


@pytest.mark.parametrize("columns", [None, "80", "40"])
def test_plan_piped_prints_every_cell_whole(columns: str | None) -> None:
    res = piped("plan", "--model", "kimi-k3", "--tier", "full", "--no-arg-check", columns=columns)
    assert res.returncode == 0, res.stderr
    assert "\u2026" not in res.stdout, "a cell was cut to an ellipsis"
    plan = json.loads(piped("plan", "--model", "kimi-k3", "--tier", "full", "--json", columns=columns).stdout)
    for g in plan["groups"]:
        # every group id and the candidate's whole argument list stand on the group's one row
        adds = " ".join(a for a in g["args"]["candidate"] if a not in g["args"]["baseline"])
        row = next(line for line in res.stdout.splitlines() if f" {g['id']} " in line)
        assert adds in row, (g["id"], row)
    assert max(len(line) for line in res.stdout.splitlines()) > 80


def test_a_console_without_a_terminal_is_full_width_and_a_terminal_keeps_its_width() -> None:
    import io

    c = console()
    c.file = io.StringIO()
    assert c.width == PIPE_WIDTH
    tty = console()
    tty.file = io.StringIO()
    tty._force_terminal = True  # what rich decides for a terminal
    assert tty.width != PIPE_WIDTH
