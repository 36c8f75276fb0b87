"""The consoles the commands print to.

On a terminal a console is as wide as the terminal, so a wide table wraps or shortens cells to fit the
screen. Without one (output piped into ``less``, ``grep`` or a file, or captured by CI), a console is
:data:`PIPE_WIDTH` columns wide whatever ``$COLUMNS`` says: every table is printed at its full natural
width and no cell is cut to an ellipsis or folded at 80 columns. ``--json`` stays the machine interface.
"""

from __future__ import annotations

from rich.console import Console, ConsoleDimensions

#: Columns of a console that writes to no terminal: wider than any table fasttrack prints.
PIPE_WIDTH = 10_000


class FullWidthConsole(Console):
    """A :class:`rich.console.Console` whose width, when it writes to no terminal, is :data:`PIPE_WIDTH`
    (decided at each print, so a console made before its stream was redirected follows the redirection)."""

    @property
    def size(self) -> ConsoleDimensions:
        dims = super().size
        if self.is_terminal or self.is_jupyter:
            return dims
        return ConsoleDimensions(PIPE_WIDTH, dims.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


def console(*, stderr: bool = False, soft_wrap: bool = False) -> Console:
    """A console for command output (``stderr``: for progress and errors)."""
    return FullWidthConsole(stderr=stderr, soft_wrap=soft_wrap)
