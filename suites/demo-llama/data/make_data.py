"""Write the demo suite's eval data: the demo model's two tasks, in the original formats.

    python suites/demo-llama/data/make_data.py          # rewrites aime25.jsonl and mrcr.jsonl here

The generator is the one the demo model was trained on
(``examples/demo_model/demo_tasks.py``), with held-out seeds:

* ``aime25.jsonl``: 120 problems with the columns of ``math-ai/aime25`` (problem, answer,
  id): integer answers in 0..999, six kinds of problem in turn (remainders mod 1000 and
  mod 100, the units digit of a product, two-digit sums plain and as a word problem,
  three-digit sums), so every run of consecutive rows covers them evenly.
* ``mrcr.jsonl``: 60 conversations with the columns of ``openai/mrcr``: 2, 4 and 8
  needles in turn, 4 to 68 ask/item turns (about 150 to 1,950 prompt tokens of the demo
  tokenizer, chat template applied: up to the demo engine's full context of 2048 tokens
  less the eval's 32 generated tokens), lengths spread so that every run of consecutive
  rows covers short to near-full contexts.

The files are committed; a test regenerates them and compares bytes.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


SEED = 2026
"""Held out: the model was trained on seed 0's stream (another label as well)."""
AIME_ROWS = 120
MRCR_ROWS = 60


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


def build(out: Path = HERE) -> list[Path]:
    tasks = _tasks()
    return [
        write_jsonl(tasks.aime_rows(AIME_ROWS, seed=SEED), out / "aime25.jsonl"),
        write_jsonl(tasks.mrcr_rows(MRCR_ROWS, seed=SEED), out / "mrcr.jsonl"),
    ]


if __name__ == "__main__":
    for p in build(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(p)
