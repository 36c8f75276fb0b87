"""Write the demo suite's eval data: small, deterministic sets in the original formats.

    python suites/demo-llama/data/make_data.py          # rewrites aime25.jsonl and mrcr.jsonl here

* ``aime25.jsonl``: 10 problems with the columns of ``math-ai/aime25`` (problem, answer, id).
* ``mrcr.jsonl``: 12 conversations with the columns of ``openai/mrcr``; 2, 4 and 8
  needles, prompts of roughly 300 to 950 tokens of the demo tokenizer (chat template
  applied) so that they fit the demo engine's ``max_model_len`` (1024) with 32
  generated tokens, spread over the 256-512 and 512-1k context bins.

The files are committed; a test regenerates them and compares bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from fasttrack.evals.synthetic import aime_problems, mrcr_samples, write_jsonl  # noqa: E402 - the repository root goes on sys.path first

SEED = 2026


def build(out: Path = HERE) -> list[Path]:
    return [
        write_jsonl(aime_problems(10, seed=SEED), out / "aime25.jsonl"),
        write_jsonl(mrcr_samples(12, seed=SEED, distractors=(0, 4), sentences=(1, 1)), out / "mrcr.jsonl"),
    ]


if __name__ == "__main__":
    for p in build(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(p)
