"""Write the eval test fixtures (deterministic): ``python tests/evals/make_fixtures.py``.

* ``fixtures/aime25.jsonl``: 6 problems in the ``math-ai/aime25`` format, one of each kind
  the demo model was trained on.
* ``fixtures/mrcr.parquet``: 6 conversations in the ``openai/mrcr`` format (parquet, as
  the hub publishes it), 2 per needle count, of 4 to 40 turns (well inside the demo
  engine's max_model_len 2048).

Both come from the demo model's task generator (``examples/demo_model/demo_tasks.py``),
so the demo model scores on them (the end-to-end evals test relies on that).
* ``fixtures/mrcr_missing_answer.jsonl``: MRCR rows without the ``answer`` column.
* ``fixtures/empty.jsonl``: no rows.

A test regenerates them into a temporary folder and compares the rows.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


SEED = 7


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write rows as JSON Lines (sorted keys off: column order as given; LF endings; UTF-8)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def _tasks():
    """The demo model's task generator (``examples/demo_model`` is not a package)."""
    name = "fasttrack_demo_model_demo_tasks"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / "demo_model" / "demo_tasks.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def write_parquet(rows: list[dict], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path, compression="none")
    return path


def build(out: Path = HERE / "fixtures") -> list[Path]:
    tasks = _tasks()
    mrcr = tasks.mrcr_rows(6, seed=SEED, turns=(4, 40))
    broken = [{k: v for k, v in r.items() if k != "answer"} for r in mrcr[:2]]
    return [
        write_jsonl(tasks.aime_rows(6, seed=SEED), out / "aime25.jsonl"),
        write_parquet(mrcr, out / "mrcr.parquet"),
        write_jsonl(broken, out / "mrcr_missing_answer.jsonl"),
        write_jsonl([], out / "empty.jsonl"),
    ]


if __name__ == "__main__":
    for p in build(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "fixtures"):
        print(p)
