"""Deterministic builder for the fasttrack demo model (a tiny Llama).

The demo model is a small Llama-architecture checkpoint with random weights, a
byte-level BPE tokenizer trained locally on ``corpus.txt`` (real English text
shipped beside this file) and a chat template. It exists so the whole harness can
run end to end on a CPU machine without downloading anything.

Properties the harness relies on:

- **Deterministic**: the same seed and corpus give byte-identical files. Every
  file is written by this module with sorted keys and no timestamps or version
  strings; ``fasttrack-model.json`` records a sha256 over all files.
- **Loads in vLLM offline** (``HF_HUB_OFFLINE=1``): head size 64 (the CPU
  attention rejects 16), ``float32`` weights (the build CPUs have AVX2 only).
- **Peaked next-token distributions**: the output layer is scaled by
  ``LM_HEAD_SCALE`` so sampling bugs (wrong temperature, top-p) are visible.
  A constant feature in hidden dimension ``BIAS_DIM`` (set in every embedding
  row) lets the output layer push *suppressed* tokens (special tokens,
  whitespace-only tokens, control characters, partial UTF-8 bytes) about 17
  logits down in every context. So random generations rarely stop early (bound
  them with ``max_tokens``) and JSON under a grammar stays compact: whitespace
  loses to the structural characters the grammar allows.
- **Architecture** ``FasttrackDemoLlamaForCausalLM`` (``model_type: llama``): the
  architecture is provided by the ``fasttrack_demo_plugin`` package
  (``examples/demo_plugin``), which must be installed for vLLM to load it.

CLI: ``python examples/demo_model/build.py --out DIR [--seed N]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
import time
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
CORPUS_PATH = HERE / "corpus.txt"

ARCHITECTURE = "FasttrackDemoLlamaForCausalLM"
"""Architecture name registered by ``fasttrack_demo_plugin``."""

HIDDEN_SIZE = 256
INTERMEDIATE_SIZE = 1024
NUM_LAYERS = 4
NUM_HEADS = 4
NUM_KV_HEADS = 2
HEAD_DIM = HIDDEN_SIZE // NUM_HEADS  # 64: the CPU attention needs a supported head size
MAX_POSITION_EMBEDDINGS = 2048
MAX_MODEL_LEN = 2048
"""The ``--max-model-len`` to serve the model with (full context = 2048 tokens)."""
TARGET_VOCAB_SIZE = 1024
INIT_STD = 0.02
LM_HEAD_SCALE = 12.0
"""Scale of the output layer; at 12 the top-20 logprobs carry about 90% of the mass."""
BIAS_DIM = 0
"""Hidden dimension that carries a constant feature from the embeddings to the output
layer, so output rows can make tokens unlikely in every context (Llama has no bias)."""
EMBED_BIAS = 0.2
SUPPRESS_WEIGHT = -8.0
"""Output-layer weight on ``BIAS_DIM`` for suppressed tokens."""
RMS_NORM_EPS = 1e-5
ROPE_THETA = 10000.0

BOS_TOKEN = "<|begin_of_text|>"
EOS_TOKEN = "<|end_of_text|>"
EOT_TOKEN = "<|eot|>"
SPECIAL_TOKENS = [
    BOS_TOKEN,
    EOS_TOKEN,
    EOT_TOKEN,
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
]
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|eot|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

MANIFEST_NAME = "fasttrack-model.json"


class BuildError(RuntimeError):
    """The demo model could not be built (bad output directory or corpus)."""


def _train_tokenizer(corpus: str) -> str:
    """Train a byte-level BPE tokenizer on ``corpus``; return canonical JSON text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=TARGET_VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = [line for line in corpus.splitlines() if line.strip()]
    tokenizer.train_from_iterator(lines, trainer=trainer)
    data = json.loads(tokenizer.to_str())
    # Canonical form: vocab ordered by id; everything else keeps the library's
    # structure (its key order is fixed by the serializer, not by hashing).
    vocab = data["model"]["vocab"]
    data["model"]["vocab"] = dict(sorted(vocab.items(), key=lambda item: item[1]))
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def _suppressed_token_ids(tokenizer_json: str) -> list[int]:
    """Tokens the output layer makes unlikely: special tokens, whitespace-only
    tokens, and tokens with control characters or partial UTF-8 sequences."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json)
    ids = []
    for i in range(tokenizer.get_vocab_size()):
        text = tokenizer.decode([i], skip_special_tokens=False)
        if (
            tokenizer.id_to_token(i) in SPECIAL_TOKENS
            or not text.strip()
            or "\ufffd" in text
            or any(ord(ch) < 32 or ord(ch) == 127 for ch in text)
        ):
            ids.append(i)
    return ids


def _dump_json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=True) + "\n"


def _write_safetensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Write a safetensors file with sorted names and a fixed header layout."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    blobs: list[bytes] = []
    for name in sorted(tensors):
        tensor = tensors[name].detach().contiguous().to(torch.float32)
        blob = tensor.numpy().astype("<f4", copy=False).tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        offset += len(blob)
        blobs.append(blob)
    header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    header_bytes += b" " * ((8 - len(header_bytes) % 8) % 8)  # 8-byte alignment
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(header_bytes)))
        fh.write(header_bytes)
        for blob in blobs:
            fh.write(blob)


def _make_weights(*, vocab_size: int, suppressed_ids: list[int], seed: int) -> dict[str, torch.Tensor]:
    """Random Llama weights, drawn in a fixed order from one seeded generator."""
    gen = torch.Generator().manual_seed(seed)

    def normal(*shape: int, std: float = INIT_STD) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float32) * std

    kv_dim = NUM_KV_HEADS * HEAD_DIM
    embed = normal(vocab_size, HIDDEN_SIZE)
    embed[:, BIAS_DIM] = EMBED_BIAS  # a constant residual feature: the output layer's "bias" input
    weights: dict[str, torch.Tensor] = {"model.embed_tokens.weight": embed}
    for i in range(NUM_LAYERS):
        p = f"model.layers.{i}"
        weights[f"{p}.self_attn.q_proj.weight"] = normal(HIDDEN_SIZE, HIDDEN_SIZE)
        weights[f"{p}.self_attn.k_proj.weight"] = normal(kv_dim, HIDDEN_SIZE)
        weights[f"{p}.self_attn.v_proj.weight"] = normal(kv_dim, HIDDEN_SIZE)
        weights[f"{p}.self_attn.o_proj.weight"] = normal(HIDDEN_SIZE, HIDDEN_SIZE)
        weights[f"{p}.mlp.gate_proj.weight"] = normal(INTERMEDIATE_SIZE, HIDDEN_SIZE)
        weights[f"{p}.mlp.up_proj.weight"] = normal(INTERMEDIATE_SIZE, HIDDEN_SIZE)
        weights[f"{p}.mlp.down_proj.weight"] = normal(HIDDEN_SIZE, INTERMEDIATE_SIZE)
        weights[f"{p}.input_layernorm.weight"] = torch.ones(HIDDEN_SIZE)
        weights[f"{p}.post_attention_layernorm.weight"] = torch.ones(HIDDEN_SIZE)
    weights["model.norm.weight"] = torch.ones(HIDDEN_SIZE)
    lm_head = normal(vocab_size, HIDDEN_SIZE) * LM_HEAD_SCALE
    lm_head[:, BIAS_DIM] = 0.0
    lm_head[suppressed_ids] = 0.0
    lm_head[suppressed_ids, BIAS_DIM] = SUPPRESS_WEIGHT
    weights["lm_head.weight"] = lm_head
    return weights


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def model_sha256(out_dir: Path) -> tuple[str, dict[str, str]]:
    """Hash of a built model: sha256 over ``name\\0file-sha256\\n`` of every file
    except the manifest, in sorted name order. Returns (digest, per-file digests)."""
    files = {
        p.relative_to(out_dir).as_posix(): _sha256_file(p)
        for p in sorted(out_dir.rglob("*"))
        if p.is_file() and p.name != MANIFEST_NAME
    }
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{files[name]}\n".encode())
    return digest.hexdigest(), files


def recipe_sha256(*, seed: int = 0, corpus_path: Path = CORPUS_PATH) -> str:
    """Fingerprint of what a build depends on: this builder's source, the corpus and the seed.

    Recorded in the manifest as ``recipe_sha256``; a cached model whose recipe differs
    (the builder or the corpus changed since it was built) must be rebuilt, even when
    its files still match their own hashes."""
    digest = hashlib.sha256()
    for part in (Path(__file__).resolve().read_bytes(), Path(corpus_path).read_bytes(), str(seed).encode()):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()


def build_model(out_dir: Path, *, seed: int = 0, corpus_path: Path = CORPUS_PATH) -> dict[str, Any]:
    """Build the demo model into ``out_dir`` and return its metadata.

    The metadata (also written to ``out_dir/fasttrack-model.json``) holds the
    architecture, sizes, the ``max_model_len`` to serve it with, the seed, the
    per-file sha256 digests, ``sha256``, one digest over all files, and
    ``recipe_sha256`` (:func:`recipe_sha256`), what the build depended on.
    Existing files in ``out_dir`` with the same names are overwritten; other files
    are left alone but are included in the hash, so build into an empty directory.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise BuildError(f"Output path {out_dir} exists and is not a directory; choose a directory path.")
    try:
        corpus = corpus_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BuildError(f"Cannot read the tokenizer corpus {corpus_path}: {exc}.") from exc
    out_dir.mkdir(parents=True, exist_ok=True)

    tokenizer_json = _train_tokenizer(corpus)
    vocab: dict[str, int] = json.loads(tokenizer_json)["model"]["vocab"]
    vocab_size = len(vocab)
    special_ids = sorted(vocab[token] for token in SPECIAL_TOKENS)
    suppressed_ids = _suppressed_token_ids(tokenizer_json)
    bos_id, eos_id, eot_id = vocab[BOS_TOKEN], vocab[EOS_TOKEN], vocab[EOT_TOKEN]

    config = {
        "architectures": [ARCHITECTURE],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bos_id,
        "eos_token_id": [eos_id, eot_id],
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": HIDDEN_SIZE,
        "initializer_range": INIT_STD,
        "intermediate_size": INTERMEDIATE_SIZE,
        "max_position_embeddings": MAX_POSITION_EMBEDDINGS,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": NUM_HEADS,
        "num_hidden_layers": NUM_LAYERS,
        "num_key_value_heads": NUM_KV_HEADS,
        "rms_norm_eps": RMS_NORM_EPS,
        "rope_parameters": {"rope_theta": ROPE_THETA, "rope_type": "default"},
        "rope_theta": ROPE_THETA,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": vocab_size,
    }
    generation_config = {"bos_token_id": bos_id, "eos_token_id": [eos_id, eot_id]}
    tokenizer_config = {
        "add_bos_token": False,
        "add_eos_token": False,
        "bos_token": BOS_TOKEN,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS_TOKEN,
        "model_max_length": MAX_MODEL_LEN,
        "pad_token": EOS_TOKEN,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    special_tokens_map = {"bos_token": BOS_TOKEN, "eos_token": EOS_TOKEN, "pad_token": EOS_TOKEN}

    (out_dir / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    (out_dir / "config.json").write_text(_dump_json(config), encoding="utf-8")
    (out_dir / "generation_config.json").write_text(_dump_json(generation_config), encoding="utf-8")
    (out_dir / "tokenizer_config.json").write_text(_dump_json(tokenizer_config), encoding="utf-8")
    (out_dir / "special_tokens_map.json").write_text(_dump_json(special_tokens_map), encoding="utf-8")
    weights = _make_weights(vocab_size=vocab_size, suppressed_ids=suppressed_ids, seed=seed)
    _write_safetensors(out_dir / "model.safetensors", weights)

    digest, files = model_sha256(out_dir)
    metadata: dict[str, Any] = {
        "architecture": ARCHITECTURE,
        "model_type": "llama",
        "seed": seed,
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": INTERMEDIATE_SIZE,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_KV_HEADS,
        "head_dim": HEAD_DIM,
        "vocab_size": vocab_size,
        "dtype": "float32",
        "max_position_embeddings": MAX_POSITION_EMBEDDINGS,
        "max_model_len": MAX_MODEL_LEN,
        "lm_head_scale": LM_HEAD_SCALE,
        "special_token_ids": special_ids,
        "suppressed_token_ids": suppressed_ids,
        "corpus_sha256": hashlib.sha256(corpus.encode("utf-8")).hexdigest(),
        "recipe_sha256": recipe_sha256(seed=seed, corpus_path=corpus_path),
        "files": files,
        "sha256": digest,
    }
    (out_dir / MANIFEST_NAME).write_text(_dump_json(metadata), encoding="utf-8")
    return metadata


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the fasttrack demo model (a tiny Llama).")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        metadata = build_model(args.out, seed=args.seed)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - started
    print(
        f"built {metadata['architecture']} in {args.out} "
        f"(vocab {metadata['vocab_size']}, {metadata['num_hidden_layers']} layers, "
        f"max_model_len {metadata['max_model_len']}) in {elapsed:.1f}s\n"
        f"sha256 {metadata['sha256']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
