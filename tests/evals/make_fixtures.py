"""Write the eval test fixtures (deterministic): ``python tests/evals/make_fixtures.py``.

* ``fixtures/aime25.jsonl``: 6 problems in the ``math-ai/aime25`` format.
* ``fixtures/mrcr.parquet``: 6 conversations in the ``openai/mrcr`` format (parquet, as
  the hub publishes it), 2 per needle count, sized for the demo engine (max_model_len 1024).
* ``fixtures/mrcr_missing_answer.jsonl``: MRCR rows without the ``answer`` column.
* ``fixtures/empty.jsonl``: no rows.

A test regenerates them into a temporary folder and compares the rows.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from fasttrack.evals.synthetic import aime_problems, mrcr_samples, write_jsonl  # noqa: E402 - the repository root goes on sys.path first

SEED = 7


def write_parquet(rows: list[dict], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path, compression="none")
    return path


def build(out: Path = HERE / "fixtures") -> list[Path]:
    mrcr = mrcr_samples(6, seed=SEED, distractors=(0, 3), sentences=(1, 1))
    broken = [{k: v for k, v in r.items() if k != "answer"} for r in mrcr[:2]]
    return [
        write_jsonl(aime_problems(6, seed=SEED), out / "aime25.jsonl"),
        write_parquet(mrcr, out / "mrcr.parquet"),
        write_jsonl(broken, out / "mrcr_missing_answer.jsonl"),
        write_jsonl([], out / "empty.jsonl"),
    ]


if __name__ == "__main__":
    for p in build(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "fixtures"):
        print(p)
