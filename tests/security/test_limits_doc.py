"""The README's security section states every limit of fasttrack/limits.py, with the value the
code uses and what the tool does at it."""

from __future__ import annotations

from fasttrack import ROOT, limits


def test_the_readme_table_is_the_code() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Security") :]
    section = section[: section.index("\n## ", 1)]
    for lim in limits.table():
        row = f"| {lim.name} | {lim.value} | {lim.at_limit} |"
        assert row in section, f"README.md, 'Security', lacks or misstates: {row}"
    assert "fasttrack/limits.py" in section


def test_every_limit_is_in_the_table() -> None:
    stated = " ".join(f"{lim.value} {lim.at_limit}" for lim in limits.table())
    constants = [
        n for n in dir(limits) if n.isupper() and not n.startswith("_") and isinstance(getattr(limits, n), int)
    ]
    # each constant either appears in the table (through its value) or bounds what the report shows
    shown_elsewhere = {
        "REPORT_MAX_TABLE_ROWS",
        "REPORT_MAX_FILES_LISTED",
        "REPORT_MAX_PLAN_POINTS",
        "TAR_MAX_READ",
        "TAR_MAX_TRAILER",
        "BUNDLE_RATIO_FLOOR",
        "SHARD_SPEC_MAX_CHARS",
        "TABLES_KEEP_TOTAL_BYTES",
    }
    assert set(constants) - shown_elsewhere, constants
    for name in sorted(set(constants) - shown_elsewhere):
        value = getattr(limits, name)
        rendered = {f"{value:,}", str(value)}
        for unit, k in (("GiB", limits.GiB), ("MiB", limits.MiB), ("KiB", limits.KiB)):
            if value >= k and value % k == 0:
                rendered.add(f"{value // k} {unit}")
        assert any(r in stated for r in rendered), f"{name} = {value} is not in limits.table()"
