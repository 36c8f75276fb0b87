"""Answers nvidia-smi's queries from a recorded GPU host (``tests/fixtures/gpu``), for tests on CPU hosts.

``--query-gpu=F1,F2,... --format=csv[,noheader][,nounits]`` is answered from the recorded
``--query-gpu=name,compute_cap,memory.total,driver_version --format=csv`` output (``index`` is the
row's position), in the fields and format asked for. ``nvlink --status`` lists the GPUs without
links and ``-q`` their names; anything else prints nothing. ``FAKE_SMI_RECORD`` names the
recorded csv (default: the H200's)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

RECORD = Path(
    os.environ.get("FAKE_SMI_RECORD") or Path(__file__).parents[1] / "fixtures" / "gpu" / "h200-nvidia-smi.csv"
)


def _rows() -> list[dict[str, str]]:
    lines = [ln for ln in RECORD.read_text().splitlines() if ln.strip()]
    cols = [c.strip() for c in lines[0].split(",")]
    rows = []
    for i, ln in enumerate(lines[1:]):
        row = {"index": str(i)}
        for col, val in zip(cols, (v.strip() for v in ln.split(",")), strict=True):
            name, _, unit = col.partition(" ")
            row[name] = val
            row[name + "\0unit"] = unit
        rows.append(row)
    return rows


def main(argv: list[str]) -> int:
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    fmt = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), "csv").split(",")
    rows = _rows()
    if query is not None:
        fields = [f.strip() for f in query.split(",")]
        if "noheader" not in fmt:
            units = [rows[0].get(f + "\0unit", "") if rows else "" for f in fields]
            print(", ".join(f"{f} {u}" if u else f for f, u in zip(fields, units, strict=True)))
        for row in rows:
            vals = [row[f] for f in fields]
            if "nounits" in fmt:
                vals = [v.split()[0] if v.endswith(" MiB") else v for v in vals]
            print(", ".join(vals))
        return 0
    if argv[:1] == ["nvlink"]:
        for row in rows:
            print(f"GPU {row['index']}: {row['name']} (UUID: GPU-recorded-{row['index']})")
        return 0
    if argv[:1] == ["-q"]:
        for row in rows:
            bus = f"{int(row['index']) + 1:02X}"
            print(f"GPU 00000000:{bus}:00.0\n    Product Name : {row['name']}\n    Fabric\n        State : N/A")
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
