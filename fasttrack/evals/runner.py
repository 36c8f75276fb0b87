"""Drive lm-eval against one engine's OpenAI-compatible server.

One call of :func:`run_lm_eval` runs one eval (one task, one seed) through
``lm_eval.simple_evaluate`` with ``log_samples=True`` and returns every sample's
output and score:

* AIME25 is lm-eval's own ``aime25`` task (its YAML from the installed lm-eval,
  prompt, stop sequences and ``process_results`` unchanged), pointed at the
  selection file with ``dataset_path: json`` and ``dataset_kwargs.data_files``; it is
  sent to ``/v1/completions`` (``local-completions``) as lm-eval's task is written.
* MRCR is fasttrack's task (``suites/common/evals/mrcr``), sent to
  ``/v1/chat/completions`` (``local-chat-completions``, chat template applied by the
  server), because every sample is a conversation.

``num_concurrent`` is the config point's batch size, so the engine really decodes
that many requests at once; the request ``seed`` and the generation settings are
recorded with the results. Nothing is tokenized on the client (``tokenizer_backend:
none``): the server sees exactly the prompt lm-eval built.
"""

from __future__ import annotations

import copy
import logging
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field

from fasttrack import ROOT
from fasttrack.errors import FasttrackError
from fasttrack.evals.datasets import EvalKind
from fasttrack.modelbase import DocModel

MRCR_TASK_YAML = ROOT / "suites" / "common" / "evals" / "mrcr" / "mrcr.yaml"
"""fasttrack's MRCR task for lm-eval."""

LM_MODEL: dict[str, str] = {"aime25": "local-completions", "mrcr": "local-chat-completions"}
"""lm-eval model type per eval kind."""
API_PATH: dict[str, str] = {"aime25": "/v1/completions", "mrcr": "/v1/chat/completions"}
SCORE_METRIC: dict[str, str] = {"aime25": "exact_match", "mrcr": "mrcr_score"}
"""The per-sample metric that is the eval's score."""


class EvalRunError(FasttrackError):
    """lm-eval could not run an eval against an engine."""


class GenerationSettings(DocModel):
    """What every request of one eval run asks for."""

    max_tokens: int
    temperature: float
    seed: int
    """Request seed (vLLM per-request sampling seed) and lm-eval's random seeds."""
    num_concurrent: int
    """Requests in flight at once (the config point's batch size)."""
    until: list[str] = Field(default_factory=list)
    """Stop sequences."""
    ignore_eos: bool = False
    """Whether requests decode past the end-of-sequence token to ``max_tokens`` (the profiled evidence runs)."""


class LmEvalOutput(DocModel):
    """The result of one lm-eval run."""

    task: str
    lm_model: str
    """lm-eval model type (local-completions / local-chat-completions)."""
    model_args: dict[str, Any]
    settings: GenerationSettings
    task_config: dict[str, Any]
    """The task configuration lm-eval ran (functions shown by name)."""
    task_source: str
    """Where the task definition came from."""
    lm_eval_version: str
    wall_s: float
    aggregate: dict[str, Any]
    """lm-eval's aggregate metrics for the task."""
    samples: list[dict[str, Any]]
    """Per doc: doc_id, output, score, prompt (as sent, truncated), finish info."""


def _lm_eval_version() -> str:
    try:
        from importlib.metadata import version

        return version("lm_eval")
    except Exception:  # the version is provenance only: any lookup failure records "unknown"
        return "unknown"


@lru_cache(maxsize=1)
def _aime_task_manager():
    """A TaskManager over lm-eval's own AIME task folder (indexing every task takes ~40 s)."""
    import lm_eval.tasks as lm_tasks
    from lm_eval.tasks import TaskManager

    aime_dir = Path(lm_tasks.__file__).parent / "aime"
    if (aime_dir / "aime25.yaml").is_file():
        return TaskManager(include_defaults=False, include_path=str(aime_dir))
    return TaskManager()


def _load_yaml(path: Path) -> dict[str, Any]:
    from lm_eval.tasks._yaml_loader import load_yaml

    return dict(load_yaml(path, resolve_func=True))


def task_config(
    kind: EvalKind, data_file: Path, *, max_tokens: int, temperature: float, ignore_eos: bool = False
) -> tuple[dict[str, Any], str]:
    """The lm-eval task config for one eval on a local selection file, and its source. ``ignore_eos``:
    every request decodes exactly ``max_tokens`` tokens (no stop sequence, vLLM's ``ignore_eos``)."""
    if kind == "aime25":
        tm = _aime_task_manager()
        entry = tm.task_index.get("aime25")
        if entry is None or entry.yaml_path is None:
            raise EvalRunError(
                "the installed lm-eval has no 'aime25' task.",
                hint="Install lm-eval 0.4.13 (pip install 'lm-eval[api]==0.4.13').",
            )
        source = str(entry.yaml_path)
        cfg = _load_yaml(Path(entry.yaml_path))
        split = cfg.get("test_split") or "test"
    else:
        source = str(MRCR_TASK_YAML)
        cfg = _load_yaml(MRCR_TASK_YAML)
        split = cfg.get("test_split") or "train"
    for key in ("tag", "group"):
        cfg.pop(key, None)
    cfg["dataset_path"] = "json"
    cfg["dataset_name"] = None
    cfg["dataset_kwargs"] = {"data_files": {split: str(data_file)}}
    gen = dict(cfg.get("generation_kwargs") or {})
    gen.update(max_gen_toks=int(max_tokens), temperature=float(temperature), do_sample=temperature > 0)
    if ignore_eos:
        # lm-eval passes generation kwargs it does not know through to the request body
        gen.update(until=[], ignore_eos=True)
    cfg["generation_kwargs"] = gen
    cfg["repeats"] = 1
    cfg["num_fewshot"] = 0
    cfg["metadata"] = {**(cfg.get("metadata") or {}), "fasttrack_task_source": source}
    return cfg, source


def _printable(cfg: dict[str, Any]) -> dict[str, Any]:
    def conv(v: Any) -> Any:
        if callable(v):
            return f"{getattr(v, '__module__', '?')}.{getattr(v, '__qualname__', repr(v))}"
        if isinstance(v, dict):
            return {str(k): conv(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        return v

    return conv(cfg)


def run_lm_eval(
    *,
    kind: EvalKind,
    base_url: str,
    model: str,
    data_file: Path,
    settings: GenerationSettings,
    max_retries: int = 3,
    timeout_s: int = 600,
) -> LmEvalOutput:
    """Run one eval through lm-eval against ``base_url`` (``http://host:port``) with ``settings`` (their stop
    sequences come from the task config; ``ignore_eos``: see :func:`task_config`)."""
    from lm_eval.tasks import TaskManager

    cfg, source = task_config(
        kind,
        data_file,
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
        ignore_eos=settings.ignore_eos,
    )
    printable = _printable(copy.copy(cfg))
    task_manager = _aime_task_manager() if kind == "aime25" else TaskManager(include_defaults=False)
    loaded = task_manager.load([cfg])
    tasks = list(loaded["tasks"].values())
    if len(tasks) != 1:
        raise EvalRunError(f"lm-eval built {len(tasks)} tasks from the {kind} config; expected 1")
    task_name = str(cfg["task"])
    model_args = {
        "base_url": base_url.rstrip("/") + API_PATH[kind],
        "model": model,
        "num_concurrent": int(settings.num_concurrent),
        "max_retries": int(max_retries),
        "tokenizer_backend": None,
        "tokenized_requests": False,
        "seed": int(settings.seed),
        "max_gen_toks": int(settings.max_tokens),
        "timeout": int(timeout_s),
    }
    settings = settings.model_copy(update={"until": list(cfg["generation_kwargs"].get("until") or [])})
    t0 = time.perf_counter()
    results = _evaluate(
        kind, base_url, model_args=model_args, tasks=tasks, task_manager=task_manager, seed=settings.seed
    )
    wall = time.perf_counter() - t0
    if not results or "samples" not in results or task_name not in results["samples"]:
        raise EvalRunError(f"lm-eval returned no per-sample log for task {task_name!r}")
    agg = results.get("results", {}).get(task_name, {})
    return LmEvalOutput(
        task=task_name,
        lm_model=LM_MODEL[kind],
        model_args=model_args,
        settings=settings,
        task_config=printable,
        task_source=source,
        lm_eval_version=_lm_eval_version(),
        wall_s=round(wall, 3),
        aggregate={k: v for k, v in agg.items() if isinstance(v, (int, float, str)) or v is None},
        samples=_sample_rows(results["samples"][task_name], task_name, SCORE_METRIC[kind]),
    )


def _evaluate(
    kind: EvalKind, base_url: str, *, model_args: dict[str, Any], tasks: list[Any], task_manager: Any, seed: int
) -> Any:
    """``lm_eval.simple_evaluate`` with its per-sample log, every seed set, its chatter lowered; its many kinds
    of failure raised as one :class:`EvalRunError`."""
    import lm_eval

    quiet = _quiet_lm_eval()
    try:
        return lm_eval.simple_evaluate(
            model=LM_MODEL[kind],
            model_args=model_args,
            tasks=tasks,
            task_manager=task_manager,
            log_samples=True,
            apply_chat_template=kind == "mrcr",
            bootstrap_iters=0,
            random_seed=seed,
            numpy_random_seed=seed,
            torch_random_seed=seed,
            fewshot_random_seed=seed,
        )
    except FasttrackError:
        raise
    except Exception as exc:  # lm-eval raises many kinds; report them as one
        raise EvalRunError(
            f"lm-eval failed running {kind} against {base_url}: {type(exc).__name__}: {exc}",
            hint="Read the engine log for a rejected request (prompt too long, wrong model name) or a crash.",
        ) from exc
    finally:
        quiet()


def _sample_rows(logged: list[dict[str, Any]], task_name: str, metric: str) -> list[dict[str, Any]]:
    """lm-eval's per-sample log as fasttrack keeps it (output, filtered output, score, prompt, target), in
    ``doc_id`` order."""
    samples = []
    for s in logged:
        resps = s.get("resps") or [[""]]
        raw = resps[0][0] if resps and resps[0] else ""
        filtered = s.get("filtered_resps") or [raw]
        if metric not in s:
            raise EvalRunError(
                f"lm-eval's sample log for {task_name!r} has no {metric!r} score (doc {s.get('doc_id')})"
            )
        samples.append(
            {
                "doc_id": int(s["doc_id"]),
                "output": raw if isinstance(raw, str) else str(raw),
                "filtered_output": filtered[0] if isinstance(filtered, list) and filtered else filtered,
                "score": float(s[metric]),
                "prompt": _prompt_of(s.get("arguments") or {}),
                "target": s.get("target"),
            }
        )
    samples.sort(key=lambda r: r["doc_id"])
    return samples


PROMPT_PREVIEW = 4000
"""Characters of the prompt lm-eval sent that the per-sample log keeps."""


def _prompt_of(args: Any) -> str:
    """The prompt lm-eval sent for one doc (the first request argument), as text.

    lm-eval logs ``arguments`` as a list of request argument tuples (context,
    generation kwargs), sometimes already turned into strings; chat contexts are
    ``JsonChatStr`` (with a ``prompt`` field).
    """
    x: Any = args
    for _ in range(6):
        if isinstance(x, str):
            break
        prompt = getattr(x, "prompt", None)
        if isinstance(prompt, str):
            x = prompt
            break
        if isinstance(x, dict):
            x = next(iter(x.values()), None)
        elif isinstance(x, (list, tuple)) and x:
            x = x[0]
        else:
            break
    text = x if isinstance(x, str) else ("" if x is None else str(x))
    return text[:PROMPT_PREVIEW]


def _quiet_lm_eval():
    """Lower lm-eval's and httpx's INFO chatter for the duration of a run; returns the undo."""
    names = ("lm-eval", "lm_eval", "httpx", "datasets")
    saved = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.WARNING)

    def undo() -> None:
        for n, lvl in saved.items():
            logging.getLogger(n).setLevel(lvl)

    return undo
