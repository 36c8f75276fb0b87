"""Deterministic builder for the fasttrack demo model (a tiny trained Llama).

The demo model is a small Llama-architecture checkpoint with a byte-level BPE
tokenizer trained locally (on ``corpus.txt``, real English text, and sample text of
the model's two tasks), a chat template, and weights trained by ``train.py`` to do
MRCR-style retrieval and AIME-style integer arithmetic (``demo_tasks.py``). The
trained weights ship beside this file (``weights.safetensors``, float16); the build
writes them as the served float32 checkpoint. It exists so the whole harness, evals
included, can run end to end on a CPU machine without downloading anything.

Properties the harness relies on:

- **Deterministic**: the same seed, corpus and shipped weights give byte-identical
  files. Every file is written by this module with sorted keys and no timestamps or
  version strings; ``fasttrack-model.json`` records a sha256 over all files.
  ``train.py --recipe gpu --device cuda`` rebuilds ``weights.safetensors`` (sha256 in
  ``train-log.json``, reproduced on an NVIDIA H200 with torch 2.11.0+cu130).
- **Loads in vLLM offline** (``HF_HUB_OFFLINE=1``): head size 64 (the CPU
  attention rejects 16), ``float32`` weights (the build CPUs have AVX2 only).
- **Scores on its evals**: greedy answers to the demo suite's AIME-format set are right
  (1.0 held out) and its MRCR answers score about 0.75 (right prefix and item form; the
  asked item itself in about one answer of six), so a numerics defect shows as a score drop.
- **Peaked next-token distributions, compact JSON**: a constant feature in hidden
  dimension ``BIAS_DIM`` (held fixed in every embedding row, written by no layer)
  lets the output layer keep *suppressed* tokens (role markers, whitespace-only
  tokens, control characters, partial UTF-8 bytes) far down in every context, so
  JSON under a grammar stays compact: whitespace loses to the structural characters
  the grammar allows. The stop tokens ``<|eot|>`` and ``<|end_of_text|>`` are not
  suppressed: the model ends its answers (bound open generations with ``max_tokens``
  and ``ignore_eos``).
- **Architecture** ``FasttrackDemoLlamaForCausalLM`` (``model_type: llama``): the
  architecture is provided by the ``fasttrack_demo_plugin`` package
  (``examples/demo_plugin``), which must be installed for vLLM to load it.

``seed`` 0 (the default) is the trained model. Another seed gives the same
architecture and tokenizer with the *untrained* initial weights of ``train.py``'s
recipe for that seed (a random model of the same shape).

CLI: ``python examples/demo_model/build.py --out DIR [--seed N]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
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

WEIGHTS_PATH = HERE / "weights.safetensors"
"""The trained weights (float16), written by ``train.py``."""
TRAIN_LOG_PATH = HERE / "train-log.json"
"""How ``weights.safetensors`` was trained: recipe, environment, loss curve, sha256, wall time."""

# Sizes: train.py's recipe (a test checks that they agree).
HIDDEN_SIZE = 256
INTERMEDIATE_SIZE = 256
NUM_LAYERS = 4
NUM_HEADS = 4
NUM_KV_HEADS = 2
HEAD_DIM = HIDDEN_SIZE // NUM_HEADS  # 64: the CPU attention needs a supported head size
MAX_POSITION_EMBEDDINGS = 2048
MAX_MODEL_LEN = 2048
"""The ``--max-model-len`` to serve the model with (full context = 2048 tokens)."""
TARGET_VOCAB_SIZE = 1024
INIT_STD = 0.02
BIAS_DIM = 0
"""Hidden dimension that carries a constant feature from the embeddings to the output
layer, so output rows can make tokens unlikely in every context (Llama has no bias)."""
EMBED_BIAS = 1.0
SUPPRESS_WEIGHT = -1000.0
"""Output-layer weight on ``BIAS_DIM`` for suppressed tokens (their only nonzero weight). The final
norm divides the constant by the hidden state's scale, so the weight is large: suppressed tokens stay
hundreds of logits below the rest, also under a JSON grammar that allows whitespace anywhere."""
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

STOP_TOKENS = (EOS_TOKEN, EOT_TOKEN)
"""Special tokens the trained model emits: the end of a completion and of a chat turn."""

MANIFEST_NAME = "fasttrack-model.json"


def _sibling(name: str) -> Any:
    """A module beside this file (this folder is not a package), imported once."""
    key = f"fasttrack_demo_model_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def _tasks() -> Any:
    return _sibling("demo_tasks")


class BuildError(RuntimeError):
    """The demo model could not be built (bad output directory or corpus)."""


def train_tokenizer(corpus_path: Path = CORPUS_PATH) -> str:
    """Train the byte-level BPE tokenizer on the corpus and the tasks' sample text; return canonical JSON text."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    corpus = corpus_path.read_text(encoding="utf-8")
    tokenizer = Tokenizer(models.BPE())
    # digits are single tokens (a space may lead the first one): arithmetic works digit by digit
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(" ?[0-9]"), "isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=TARGET_VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = [line for line in corpus.splitlines() if line.strip()] + _tasks().tokenizer_text()
    tokenizer.train_from_iterator(lines, trainer=trainer)
    data = json.loads(tokenizer.to_str())
    # Canonical form: vocab ordered by id; everything else keeps the library's
    # structure (its key order is fixed by the serializer, not by hashing).
    vocab = data["model"]["vocab"]
    data["model"]["vocab"] = dict(sorted(vocab.items(), key=lambda item: item[1]))
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def suppressed_token_ids(tokenizer_json: str) -> list[int]:
    """Tokens the output layer makes unlikely: special tokens other than the stop tokens,
    whitespace-only tokens, and tokens with control characters or partial UTF-8 sequences."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json)
    ids = []
    for i in range(tokenizer.get_vocab_size()):
        text = tokenizer.decode([i], skip_special_tokens=False)
        token = tokenizer.id_to_token(i)
        if token in STOP_TOKENS:
            continue
        if (
            token in SPECIAL_TOKENS
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


def read_float16_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a float16 safetensors file (``train.py``'s output), as float32."""
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        if spec["dtype"] != "F16":
            raise BuildError(f"{path}: tensor {name} is {spec['dtype']}, expected F16")
        lo, hi = spec["data_offsets"]
        flat = torch.frombuffer(bytearray(raw[8 + size + lo : 8 + size + hi]), dtype=torch.float16)
        tensors[name] = flat.reshape(spec["shape"]).to(torch.float32)
    return tensors


def _trained_weights(vocab_size: int, weights_path: Path) -> dict[str, torch.Tensor]:
    """The shipped trained weights, checked against the tokenizer and the sizes."""
    if not weights_path.is_file():
        raise BuildError(
            f"The trained weights {weights_path} are missing; rebuild them with "
            "python examples/demo_model/train.py --out DIR --recipe gpu --device cuda and copy "
            "DIR/weights.safetensors there."
        )
    weights = read_float16_safetensors(weights_path)
    expected = {
        "model.embed_tokens.weight": [vocab_size, HIDDEN_SIZE],
        "lm_head.weight": [vocab_size, HIDDEN_SIZE],
        "model.layers.0.mlp.down_proj.weight": [HIDDEN_SIZE, INTERMEDIATE_SIZE],
        f"model.layers.{NUM_LAYERS - 1}.self_attn.k_proj.weight": [NUM_KV_HEADS * HEAD_DIM, HIDDEN_SIZE],
    }
    for name, shape in expected.items():
        if name not in weights or list(weights[name].shape) != shape:
            got = list(weights[name].shape) if name in weights else None
            raise BuildError(
                f"{weights_path} does not fit this tokenizer and these sizes ({name}: {got}, expected {shape}); "
                "retrain with examples/demo_model/train.py."
            )
    return weights


def _untrained_weights(vocab_size: int, suppressed_ids: list[int], seed: int) -> dict[str, torch.Tensor]:
    """The recipe's initial (untrained) weights for ``seed``."""
    train = _sibling("train")
    model = train.init_model(dataclasses.replace(train.RECIPE, seed=seed), vocab_size, suppressed_ids)
    return model.state()


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


RECIPE_FILES = ("build.py", "demo_tasks.py", "train.py", "weights.safetensors")
"""Files beside this one a build depends on (with the corpus and the seed)."""


def recipe_sha256(*, seed: int = 0, corpus_path: Path = CORPUS_PATH) -> str:
    """Fingerprint of what a build depends on: this builder's source, the tasks and training
    code, the shipped weights, the corpus and the seed.

    Recorded in the manifest as ``recipe_sha256``; a cached model whose recipe differs
    (any of these changed since it was built) must be rebuilt, even when its files still
    match their own hashes."""
    digest = hashlib.sha256()
    parts = [(HERE / name).read_bytes() if (HERE / name).is_file() else b"" for name in RECIPE_FILES]
    for part in (*parts, Path(corpus_path).read_bytes(), str(seed).encode()):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()


def build_model(
    out_dir: Path, *, seed: int = 0, corpus_path: Path = CORPUS_PATH, weights_path: Path = WEIGHTS_PATH
) -> dict[str, Any]:
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

    tokenizer_json = train_tokenizer(corpus_path)
    vocab: dict[str, int] = json.loads(tokenizer_json)["model"]["vocab"]
    vocab_size = len(vocab)
    special_ids = sorted(vocab[token] for token in SPECIAL_TOKENS)
    suppressed_ids = suppressed_token_ids(tokenizer_json)
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
    trained = seed == 0
    if trained:
        weights = _trained_weights(vocab_size, weights_path)
    else:
        weights = _untrained_weights(vocab_size, suppressed_ids, seed)
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
        "trained": trained,
        "weights_sha256": _sha256_file(weights_path) if trained else None,
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
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="0 (default): the trained weights; N: the recipe's untrained weights for seed N",
    )
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
