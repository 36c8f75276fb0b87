"""The demo model builder: deterministic, complete, and loadable by transformers.

No vLLM here: these tests build the model (a few seconds: the tokenizer is trained and
the shipped trained weights are converted) and inspect files.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILDER = ROOT / "examples" / "demo_model" / "build.py"


def _load_builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fasttrack_demo_build_under_test", BUILDER)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _sibling(name: str) -> ModuleType:
    """A module of examples/demo_model (not a package), loaded the way the builder loads it."""
    return _load_builder()._sibling(name)


@pytest.fixture(scope="module")
def builder() -> ModuleType:
    return _load_builder()


@pytest.fixture(scope="module")
def built(builder: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("demo-model")
    return out, builder.build_model(out)


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_files_and_manifest(built: tuple[Path, dict], builder: ModuleType) -> None:
    out, meta = built
    names = {p.name for p in out.iterdir()}
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "fasttrack-model.json",
    } <= names
    manifest = json.loads((out / "fasttrack-model.json").read_text())
    assert manifest == meta
    assert set(meta["files"]) == names - {"fasttrack-model.json"}
    for name, digest in meta["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    assert builder.model_sha256(out)[0] == meta["sha256"]


def test_config_fits_the_cpu_engine(built: tuple[Path, dict]) -> None:
    out, meta = built
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["FasttrackDemoLlamaForCausalLM"]
    assert config["model_type"] == "llama"
    assert config["hidden_size"] // config["num_attention_heads"] == config["head_dim"] == 64
    assert config["max_position_embeddings"] >= meta["max_model_len"] == 2048
    assert (
        config["vocab_size"]
        == meta["vocab_size"]
        == len(json.loads((out / "tokenizer.json").read_text())["model"]["vocab"])
    )
    assert 512 <= config["vocab_size"] <= 2048


def test_same_seed_is_byte_identical_across_processes(built: tuple[Path, dict], tmp_path: Path) -> None:
    """A fresh interpreter with a different hash seed writes the same bytes."""
    out, meta = built
    other = tmp_path / "again"
    env = dict(os.environ, PYTHONHASHSEED="12345")
    proc = subprocess.run(
        [sys.executable, str(BUILDER), "--out", str(other)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert meta["sha256"] in proc.stdout
    assert _tree_bytes(other) == _tree_bytes(out)


def test_other_seed_changes_weights_only(builder: ModuleType, built: tuple[Path, dict], tmp_path: Path) -> None:
    out, meta = built
    other = builder.build_model(tmp_path / "seed1", seed=1)
    assert other["sha256"] != meta["sha256"]
    assert other["files"]["model.safetensors"] != meta["files"]["model.safetensors"]
    assert other["files"]["tokenizer.json"] == meta["files"]["tokenizer.json"]


def test_safetensors_header_is_canonical(built: tuple[Path, dict]) -> None:
    out, _ = built
    raw = (out / "model.safetensors").read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    names = [k for k in header if k != "__metadata__"]
    assert names == sorted(names)
    assert header["__metadata__"] == {"format": "pt"}
    end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    assert 8 + size + end == len(raw)


def test_weights_load_and_keep_the_suppression_structure(built: tuple[Path, dict], builder: ModuleType) -> None:
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    out, meta = built
    tensors = safetensors_torch.load_file(str(out / "model.safetensors"))
    lm_head, embed = tensors["lm_head.weight"], tensors["model.embed_tokens.weight"]
    assert lm_head.shape == (meta["vocab_size"], meta["hidden_size"])
    assert all(t.dtype == torch.float32 for t in tensors.values())
    bias = builder.BIAS_DIM
    # the constant feature: set in every embedding row, written by no layer
    assert torch.all(embed[:, bias] == builder.EMBED_BIAS)
    for i in range(meta["num_hidden_layers"]):
        assert torch.all(tensors[f"model.layers.{i}.self_attn.o_proj.weight"][bias] == 0)
        assert torch.all(tensors[f"model.layers.{i}.mlp.down_proj.weight"][bias] == 0)
    # suppressed rows read only that feature, with a large negative weight; the stop tokens are not suppressed
    sup = meta["suppressed_token_ids"]
    vocab = json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]
    stops = {vocab[t] for t in builder.STOP_TOKENS}
    assert set(meta["special_token_ids"]) - stops <= set(sup) and not stops & set(sup)
    assert torch.all(lm_head[sup][:, bias] == builder.SUPPRESS_WEIGHT)
    others = [c for c in range(meta["hidden_size"]) if c != bias]
    assert torch.all(lm_head[sup][:, others] == 0)


def test_trained_model_is_peaked_and_keeps_suppressed_tokens_down(built: tuple[Path, dict]) -> None:
    """On its own tasks and on other text (English, JSON), greedy next-token distributions are
    peaked and the suppressed tokens carry almost no probability."""
    torch = pytest.importorskip("torch")
    tokenizers = pytest.importorskip("tokenizers")
    train = _sibling("train")
    out, meta = built
    model = train.load_model(out)
    tok = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    texts = [
        "Question: Find the remainder when $70412$ is divided by $1000$.\nAnswer:",
        "<|begin_of_text|><|user|>\nWrite a poem about owls.<|eot|>\n<|assistant|>\n",
        "Alice was beginning to get very tired of sitting by her sister on the bank, and of",
        '<|begin_of_text|><|user|>\nDescribe the city of Oslo as JSON.<|eot|>\n<|assistant|>\n{"name":"',
    ]
    sup = meta["suppressed_token_ids"]
    with torch.no_grad():
        for k, text in enumerate(texts):
            ids = tok.encode(text).ids
            probs = torch.softmax(model(torch.tensor([ids]))[0], dim=-1)
            # every position whose next token is not itself suppressed (a role marker of the chat
            # template follows some; the model never generates there), and the last one
            where = [i for i in range(len(ids) - 1) if ids[i + 1] not in sup] + [len(ids) - 1]
            # on its own tasks almost none; on text it was never trained on (English, JSON) the
            # fixed output rows keep them to a few percent (measured: at most 0.041 and 0.022)
            bound = 1e-3 if k < 2 else 0.05
            assert probs[where][:, sup].sum(-1).max().item() < bound, text
        first = torch.softmax(model(torch.tensor([tok.encode(texts[0]).ids]))[0, -1], dim=-1)
    assert first.max().item() > 0.5, "the trained model should be confident on its own task"


def test_whitespace_and_control_tokens_are_suppressed(built: tuple[Path, dict]) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    out, meta = built
    tok = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    texts = {i: tok.decode([i], skip_special_tokens=False) for i in range(tok.get_vocab_size())}
    whitespace = {i for i, t in texts.items() if t and not t.strip()}
    assert whitespace, "the vocabulary should contain whitespace-only tokens"
    assert whitespace <= set(meta["suppressed_token_ids"])
    assert tok.token_to_id('"') not in meta["suppressed_token_ids"]
    assert len(meta["suppressed_token_ids"]) < meta["vocab_size"] / 4


def test_tokenizer_and_chat_template(built: tuple[Path, dict]) -> None:
    transformers = pytest.importorskip("transformers")
    out, _ = built
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    text = "Alice was beginning to get very tired of sitting by her sister."
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert len(ids) < len(text) / 2, "the BPE merges should compress English text"
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hello"}], tokenize=False, add_generation_prompt=True)
    assert prompt == "<|begin_of_text|><|user|>\nHello<|eot|>\n<|assistant|>\n"


def test_cli_reports_a_bad_output_path(tmp_path: Path) -> None:
    target = tmp_path / "a-file"
    target.write_text("x")
    proc = subprocess.run(
        [sys.executable, str(BUILDER), "--out", str(target)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "not a directory" in proc.stderr
    assert "Traceback" not in proc.stderr
