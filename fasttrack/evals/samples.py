"""Which samples an eval runs on, identically on both sides.

The selection is made once (on the first engine that runs the eval) and reused on
every other engine, so baseline and candidate see the same samples in the same
order. It is written to a JSON Lines file in the original format that lm-eval
loads (``dataset_path: json``).

* AIME25: the first ``limit`` problems in file order; the sample id is the ``id``
  column (the row number when ids are missing or repeated).
* MRCR: samples longer than the engine can serve (prompt tokens + max_tokens above
  ``max_model_len``) are skipped, as OpenAI's reference loop does, and counted; the
  rest are taken interleaved by needle count (2, 4, 8, 2, ...) in file order, or
  longest first when the eval targets long-context points. Prompt tokens are
  counted by the served model's tokenizer with its chat template.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from pydantic import Field

from fasttrack.errors import FasttrackError
from fasttrack.evals.datasets import EvalKind, ResolvedDataset
from fasttrack.evals.mrcr import context_bin, parse_prompt
from fasttrack.modelbase import DocModel


class NoSamples(FasttrackError):
    """No sample of a dataset can be run (e.g. every MRCR prompt is longer than the context)."""


class EvalSample(DocModel):
    """One selected sample."""

    sample_id: str
    """Stable id (AIME: the problem id; MRCR: 'mrcr-<row>')."""
    index: int
    """Row number in the source dataset (0-based)."""
    doc_id: int
    """Position in the selection file (lm-eval's doc_id)."""
    prompt_sha256: str
    """sha256 of the sample's prompt field (problem text or conversation JSON)."""
    n_tokens: int | None = None
    """MRCR: prompt tokens (served tokenizer, chat template applied)."""
    bin: str | None = None
    """MRCR: context-length bin of ``n_tokens``."""
    n_needles: int | None = None
    """MRCR: needle count."""


class Selection(DocModel):
    """The samples of one eval, and how they were chosen."""

    eval: str
    kind: EvalKind
    samples: list[EvalSample]
    rows: list[dict[str, Any]] = Field(default_factory=list, exclude=True, repr=False)
    """Selected rows in the original format, in selection order."""
    limit: int | None
    """Cap on samples (scope ``limit`` and the tier's ``eval_limit``, the smaller)."""
    max_prompt_tokens: int | None = None
    """MRCR: longest prompt admitted (max_model_len - max_tokens)."""
    skipped_too_long: int = 0
    """MRCR: samples examined and skipped because they do not fit."""
    order: str
    """How samples were ordered before the cap."""
    file: str | None = None
    """The selection file lm-eval reads."""
    file_sha256: str | None = None

    def write(self, directory: Path) -> Path:
        """Write the selected rows as JSON Lines (name carries a content hash) and record it."""
        directory.mkdir(parents=True, exist_ok=True)
        body = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in self.rows)
        digest = hashlib.sha256(body.encode()).hexdigest()
        path = directory / f"{self.eval}-samples-{digest[:12]}.jsonl"
        path.write_text(body, encoding="utf-8")
        self.file, self.file_sha256 = str(path), digest
        return path

    def write_subset(self, directory: Path, n: int) -> Path:
        """Write the first ``n`` selected rows as JSON Lines (for a short evidence run); returns the path."""
        directory.mkdir(parents=True, exist_ok=True)
        body = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in self.rows[:n])
        digest = hashlib.sha256(body.encode()).hexdigest()
        path = directory / f"{self.eval}-first{n}-{digest[:12]}.jsonl"
        path.write_text(body, encoding="utf-8")
        return path


def _sha(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def select_samples(
    ds: ResolvedDataset,
    *,
    limit: int | None,
    count_tokens: Callable[[list[dict[str, str]]], int] | None = None,
    max_prompt_tokens: int | None = None,
    prefer_long: bool = False,
) -> Selection:
    """Choose the samples of one eval (see the module docstring)."""
    if ds.kind == "aime25":
        return _select_aime(ds, limit)
    if count_tokens is None:
        raise ValueError("MRCR sample selection needs a token counter")
    return _select_mrcr(ds, limit, count_tokens, max_prompt_tokens, prefer_long)


def _select_aime(ds: ResolvedDataset, limit: int | None) -> Selection:
    rows = ds.rows[:limit] if limit else list(ds.rows)
    ids = [str(r["id"]) for r in rows if r.get("id") is not None]
    unique = len(ids) == len(rows) and len(set(ids)) == len(ids)
    names = ids if unique else [f"row-{i}" for i in range(len(rows))]
    samples = [
        EvalSample(sample_id=names[i], index=i, doc_id=i, prompt_sha256=_sha(r["problem"])) for i, r in enumerate(rows)
    ]
    return Selection(eval=ds.eval, kind="aime25", samples=samples, rows=rows, limit=limit, order="file order")


def _select_mrcr(
    ds: ResolvedDataset,
    limit: int | None,
    count_tokens: Callable[[list[dict[str, str]]], int],
    max_prompt_tokens: int | None,
    prefer_long: bool,
) -> Selection:
    indexed = list(enumerate(ds.rows))
    if prefer_long:

        def n_chars(item: tuple[int, dict[str, Any]]) -> int:
            r = item[1]
            if r.get("n_chars") is not None:
                return int(r["n_chars"])
            return sum(len(m["content"]) for m in parse_prompt(r["prompt"]))

        order = sorted(indexed, key=lambda it: (-n_chars(it), it[0]))
        how = "longest first (n_chars), skipping prompts that do not fit"
    else:
        groups: dict[int, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
        for it in indexed:
            groups[int(it[1]["n_needles"])].append(it)
        keys = sorted(groups)
        order = []
        for k in range(max(len(g) for g in groups.values())):
            order.extend(groups[n][k] for n in keys if k < len(groups[n]))
        how = "interleaved by needle count in file order"
    samples: list[EvalSample] = []
    rows: list[dict[str, Any]] = []
    skipped = 0
    for index, row in order:
        if limit and len(samples) >= limit:
            break
        messages = parse_prompt(row["prompt"])
        n = int(count_tokens(messages))
        if max_prompt_tokens is not None and n > max_prompt_tokens:
            skipped += 1
            continue
        samples.append(
            EvalSample(
                sample_id=f"mrcr-{index:05d}",
                index=index,
                doc_id=len(samples),
                prompt_sha256=_sha(row["prompt"]),
                n_tokens=n,
                bin=context_bin(n),
                n_needles=int(row["n_needles"]),
            )
        )
        rows.append(row)
    if not samples:
        raise NoSamples(
            f"no sample of MRCR dataset {ds.location!r} fits the engine: all {skipped} examined prompts are longer "
            f"than {max_prompt_tokens} tokens (max_model_len minus the eval's max_tokens).",
            hint=(
                "Raise the engine's max_model_len, lower the eval's max_tokens, or use a dataset with shorter prompts."
            ),
        )
    return Selection(
        eval=ds.eval,
        kind="mrcr",
        samples=samples,
        rows=rows,
        limit=limit,
        max_prompt_tokens=max_prompt_tokens,
        skipped_too_long=skipped,
        order=how,
    )
