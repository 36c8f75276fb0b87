"""Dataset resolution: local files in the original formats, the hub, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic_data import mrcr_samples, write_jsonl

from fasttrack.evals.datasets import DatasetFormatError, DatasetNotFound, resolve_dataset
from fasttrack.evals.samples import NoSamples, select_samples

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _resolve(**kw):
    kw.setdefault("name", "mrcr")
    kw.setdefault("kind", "mrcr")
    kw.setdefault("data", None)
    kw.setdefault("hub_dataset", None)
    kw.setdefault("resolve_path", lambda rel: FIXTURES / rel)
    kw.setdefault("hub_check", lambda _id: False)
    return resolve_dataset(**kw)


def test_local_parquet_in_the_original_format() -> None:
    ds = _resolve(data="mrcr.parquet")
    assert ds.source == "local" and ds.given_by == "scope" and ds.format == "parquet"
    assert ds.n_rows == 6 and len(ds.sha256) == 64
    assert {
        "prompt",
        "answer",
        "random_string_to_prepend",
        "n_needles",
        "desired_msg_index",
        "total_messages",
        "n_chars",
        "date_added",
    } <= set(ds.columns)


def test_command_line_path_wins_over_the_scope(tmp_path: Path) -> None:
    ds = _resolve(name="aime25", kind="aime25", data="does-not-matter.jsonl", override=str(FIXTURES / "aime25.jsonl"))
    assert ds.given_by == "command_line" and ds.n_rows == 6


def test_missing_command_line_path_is_a_clear_error() -> None:
    with pytest.raises(
        DatasetNotFound, match=r"dataset 'aime25' not found at '/nope/aime.jsonl' \(given on the command line\)"
    ):
        _resolve(name="aime25", kind="aime25", override="/nope/aime.jsonl")


def test_missing_scope_file_and_unreachable_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DatasetNotFound) as err:
        _resolve(data="data/missing.jsonl")
    msg = err.value.message
    assert f"dataset 'mrcr' not found at '{FIXTURES / 'data/missing.jsonl'}'" in msg
    assert "the hub is unreachable (HF_HUB_OFFLINE=1)" in msg
    assert "--eval-data mrcr=PATH" in (err.value.hint or "")


def test_no_local_data_and_no_hub() -> None:
    with pytest.raises(DatasetNotFound, match="has no local file .* the hub dataset 'openai/mrcr' is unreachable"):
        _resolve(data=None)


def test_hub_is_used_when_reachable_and_no_local_file() -> None:
    rows = mrcr_samples(2, seed=1)
    calls: list[str] = []
    ds = _resolve(
        data="data/missing.jsonl",
        hub_dataset="openai/mrcr",
        hub_check=lambda i: calls.append(i) or True,
        hub_loader=lambda i, kind: rows,
    )
    assert calls == ["openai/mrcr"]
    assert ds.source == "hub" and ds.location == "openai/mrcr" and ds.n_rows == 2


def test_empty_dataset_never_passes_as_zero_samples() -> None:
    with pytest.raises(DatasetFormatError, match="has no rows"):
        _resolve(name="aime25", kind="aime25", override=str(FIXTURES / "empty.jsonl"))


def test_missing_columns_are_named() -> None:
    with pytest.raises(DatasetFormatError, match=r"lacks column\(s\) \['answer'\]"):
        _resolve(override=str(FIXTURES / "mrcr_missing_answer.jsonl"))


def test_malformed_jsonl_line(tmp_path: Path) -> None:
    p = tmp_path / "aime.jsonl"
    p.write_text('{"problem": "x", "answer": "1"}\n{not json}\n')
    with pytest.raises(DatasetFormatError, match="line 2 is not valid JSON"):
        _resolve(name="aime25", kind="aime25", override=str(p))


def test_unsupported_suffix(tmp_path: Path) -> None:
    p = tmp_path / "aime.txt"
    p.write_text("x")
    with pytest.raises(DatasetFormatError, match="not a supported data file"):
        _resolve(name="aime25", kind="aime25", override=str(p))


def test_folder_of_files_like_a_hub_snapshot(tmp_path: Path) -> None:
    rows = mrcr_samples(4, seed=3)
    write_jsonl(rows[:2], tmp_path / "2needle" / "a.jsonl")
    write_jsonl(rows[2:], tmp_path / "4needle" / "b.jsonl")
    ds = _resolve(override=str(tmp_path))
    assert ds.n_rows == 4 and len(ds.files) == 2


def test_bad_mrcr_conversation(tmp_path: Path) -> None:
    row = mrcr_samples(1, seed=3)[0] | {"prompt": json.dumps({"not": "a list"})}
    write_jsonl([row], tmp_path / "m.jsonl")
    with pytest.raises(DatasetFormatError, match="row 1 of the MRCR dataset .* malformed"):
        _resolve(override=str(tmp_path / "m.jsonl"))


def test_mrcr_selection_skips_prompts_that_do_not_fit_and_says_so() -> None:
    ds = _resolve(data="mrcr.parquet")
    sizes = {}

    def count(messages):
        n = sum(len(m["content"]) for m in messages) // 4
        sizes[len(sizes)] = n
        return n

    sel = select_samples(ds, limit=None, count_tokens=count, max_prompt_tokens=10**9)
    assert len(sel.samples) == 6 and sel.skipped_too_long == 0
    assert [s.n_needles for s in sel.samples[:3]] == [2, 4, 8]  # interleaved by needle count
    cap = sorted(sizes.values())[2]
    sel = select_samples(ds, limit=None, count_tokens=count, max_prompt_tokens=cap)
    assert len(sel.samples) == 3 and sel.skipped_too_long == 3
    assert all(s.n_tokens <= cap for s in sel.samples)
    with pytest.raises(NoSamples, match="fits the engine"):
        select_samples(ds, limit=None, count_tokens=count, max_prompt_tokens=1)


def test_selection_file_is_written_in_the_original_format(tmp_path: Path) -> None:
    ds = _resolve(name="aime25", kind="aime25", override=str(FIXTURES / "aime25.jsonl"))
    sel = select_samples(ds, limit=4)
    path = sel.write(tmp_path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == ds.rows[:4]
    assert [s.sample_id for s in sel.samples] == ["0", "1", "2", "3"]
    assert sel.file_sha256 and sel.file_sha256[:12] in path.name
