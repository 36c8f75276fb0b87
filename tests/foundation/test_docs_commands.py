"""Every ``fasttrack`` command line in the docs' shell blocks names a command that exists, with options it has
and the positional arguments it takes (the README's tour and the guides have tests of their own that also run
some of them)."""

from __future__ import annotations

import pytest
from doc_testlib import check_command_line, code_blocks, command_lines

from fasttrack import ROOT

DOCS = [ROOT / "examples" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def doc_commands() -> list[tuple[str, str]]:
    return [
        (str(doc.relative_to(ROOT)), line)
        for doc in DOCS
        for lang in ("bash", "sh", "console")
        for block in code_blocks(doc, lang)
        for line in command_lines(block)
    ]


def test_the_docs_show_commands() -> None:
    docs = {d for d, _ in doc_commands()}
    assert {"docs/pr-flow.md", "docs/scale-out.md", "docs/gpu-cluster.md", "docs/writing-a-scope.md"} <= docs


@pytest.mark.parametrize(("doc", "line"), doc_commands())
def test_every_docs_command_exists(doc: str, line: str) -> None:
    check_command_line(line, run_help=False)


def test_a_wrong_option_is_caught() -> None:
    with pytest.raises(AssertionError, match="has no option --no-such-option"):
        check_command_line("fasttrack verify b.tar.gz --no-such-option", run_help=False)
