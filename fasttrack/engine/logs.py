"""Reading an engine's log: its tail, and the lines a regex finds (fallback lines)."""

from __future__ import annotations

import os
import re
from pathlib import Path


def free_log_path(log_dir: Path, stem: str) -> Path:
    """``<log_dir>/<stem>.log``, or ``<stem>-2.log``, ``-3``... when that exists (a restart keeps the old log)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / f"{stem}.log"
    i = 2
    while path.exists():
        path = log_dir / f"{stem}-{i}.log"
        i += 1
    return path


def read_log_tail(path: Path | None, n: int = 40, *, max_bytes: int = 256 * 1024) -> str:
    """The last ``n`` lines of a log file ('' when there is none)."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[-n:])


def read_log_range(path: Path | None, start: int = 0, end: int | None = None) -> str:
    """The text of a log file between two byte offsets ('' when there is no log)."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read() if end is None else f.read(max(0, end - start))
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


def scan_log(text: str, pattern: str | re.Pattern[str]) -> list[str]:
    """Lines of ``text`` in which ``pattern`` (a regex) is found."""
    rx = re.compile(pattern) if isinstance(pattern, str) else pattern
    return [line for line in text.splitlines() if rx.search(line)]


def scan_log_file(
    path: str | Path, pattern: str | re.Pattern[str], *, start: int = 0, end: int | None = None
) -> list[str]:
    """Matching lines of a log file between two byte offsets."""
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read() if end is None else f.read(max(0, end - start))
    return scan_log(data.decode("utf-8", errors="replace"), pattern)
