"""Deterministic builder for the GPU demo model: the trained demo Llama inside a ~1B-parameter Llama.

The tiny trained model (``build.py``: hidden 256, 4 layers) decodes in microseconds on a GPU, so its
decode steps are bound by the host, and timing them measures Python, not kernels. This builder embeds
its trained weights in a Llama of the same architecture with hidden size 2048 (32 heads of 64, 16 KV
heads), intermediate size 8192 and 16 layers, about 1.0B parameters in bfloat16, so a decode step streams
about 2 GB of weights (GPU-bound, about a millisecond on an H200), while the model computes the same
function as the trained one (up to bfloat16 rounding):

- The residual stream's channels 256..2047 stay zero: the embeddings are zero there, and every output
  projection (``o_proj``, ``down_proj``) has zero rows there.
- The extra attention heads and MLP units compute on the real channels with seeded random weights (so
  the GEMMs read real data), and their outputs are dropped: the output projections' columns for them are zero.
- RMSNorm averages over 2048 channels of which 256 are non-zero, a mean 8 times smaller: the norm weights
  are divided by sqrt(8) and ``rms_norm_eps`` by 8, which gives exactly the trained model's norm.
- The 12 layers after the 4 trained ones are identities on the residual stream (zero output projections)
  that still do all of a layer's work.
- Head dimension, the grouping of query heads on KV heads (2 per KV head), rotary embedding, vocabulary
  and tokenizer are the trained model's.

Deterministic: the same seed gives byte-identical files (``fasttrack-model.json`` records the sha256).
CLI: ``python examples/demo_model/widen.py --out DIR [--seed N] [--hidden H --intermediate I --layers L]``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent

HIDDEN_SIZE = 2048
INTERMEDIATE_SIZE = 8192
NUM_LAYERS = 16
WIDE_SEED = 2026
"""Seed of the random weights of the extra heads, units and layers."""
DTYPE = "bfloat16"


def _build() -> Any:
    key = "fasttrack_demo_model_build"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / "build.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


class WidenError(RuntimeError):
    """The model cannot be widened to the requested sizes."""


def widen_weights(
    small: dict[str, torch.Tensor],
    *,
    hidden: int = HIDDEN_SIZE,
    intermediate: int = INTERMEDIATE_SIZE,
    layers: int = NUM_LAYERS,
    seed: int = WIDE_SEED,
) -> dict[str, torch.Tensor]:
    """The widened state dict (float32) of the trained model's state dict ``small``."""
    b = _build()
    h0, i0, l0, d = b.HIDDEN_SIZE, b.INTERMEDIATE_SIZE, b.NUM_LAYERS, b.HEAD_DIM
    heads0, kv0 = b.NUM_HEADS, b.NUM_KV_HEADS
    if hidden % d or hidden < h0 or intermediate < i0 or layers < l0:
        raise WidenError(
            f"cannot widen {h0}/{i0}/{l0} to hidden {hidden}, intermediate {intermediate}, layers {layers}"
        )
    heads, kv = hidden // d, hidden // d // (heads0 // kv0)
    scale = math.sqrt(hidden / h0)
    gen = torch.Generator().manual_seed(seed)

    def rand(rows: int, cols: int) -> torch.Tensor:
        return torch.randn(rows, cols, generator=gen) * (cols**-0.5)

    def embed(t: torch.Tensor, rows: int, cols: int, base: torch.Tensor | None = None) -> torch.Tensor:
        out = base if base is not None else torch.zeros(rows, cols)
        out[: t.shape[0], : t.shape[1]] = t
        return out

    vocab = small["model.embed_tokens.weight"].shape[0]
    out: dict[str, torch.Tensor] = {
        "model.embed_tokens.weight": embed(small["model.embed_tokens.weight"], vocab, hidden),
        "lm_head.weight": embed(small["lm_head.weight"], vocab, hidden, rand(vocab, hidden)),
        "model.norm.weight": _norm(small["model.norm.weight"], hidden, scale),
    }
    for i in range(layers):
        p = f"model.layers.{i}."
        real = i < l0
        q_rows, kv_rows = heads * d, kv * d
        w = {
            name: rand(r, c)
            for name, (r, c) in {
                "self_attn.q_proj": (q_rows, hidden),
                "self_attn.k_proj": (kv_rows, hidden),
                "self_attn.v_proj": (kv_rows, hidden),
                "mlp.gate_proj": (intermediate, hidden),
                "mlp.up_proj": (intermediate, hidden),
            }.items()
        }
        w["self_attn.o_proj"] = torch.zeros(hidden, q_rows)
        w["mlp.down_proj"] = torch.zeros(hidden, intermediate)
        if real:
            for name in w:
                w[name] = embed(small[f"{p}{name}.weight"], *w[name].shape, base=w[name])
        for name, t in w.items():
            out[f"{p}{name}.weight"] = t
        for norm in ("input_layernorm", "post_attention_layernorm"):
            src = small[f"{p}{norm}.weight"] if real else torch.ones(h0)
            out[f"{p}{norm}.weight"] = _norm(src, hidden, scale)
    return out


def _norm(weight: torch.Tensor, hidden: int, scale: float) -> torch.Tensor:
    out = torch.full((hidden,), 1.0 / scale)
    out[: weight.shape[0]] = weight / scale
    return out


def _write_bf16_safetensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """A safetensors file of bfloat16 tensors with sorted names and a fixed header layout."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    names = sorted(tensors)
    for name in names:
        n = tensors[name].numel() * 2
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + n]}
        offset += n
    header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    header_bytes += b" " * ((8 - len(header_bytes) % 8) % 8)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(header_bytes)))
        fh.write(header_bytes)
        for name in names:
            t = tensors[name].detach().contiguous().to(torch.bfloat16)
            fh.write(t.view(torch.int16).numpy().astype("<i2", copy=False).tobytes())


def recipe_sha256(*, seed: int = 0) -> str:
    """What a build depends on: this builder, the trained model's recipe, and the seed."""
    digest = hashlib.sha256()
    digest.update(hashlib.sha256((HERE / "widen.py").read_bytes()).digest())
    digest.update(_build().recipe_sha256(seed=0).encode())
    digest.update(str(seed).encode())
    return digest.hexdigest()


def build_model(
    out_dir: Path,
    *,
    seed: int = 0,
    hidden: int = HIDDEN_SIZE,
    intermediate: int = INTERMEDIATE_SIZE,
    layers: int = NUM_LAYERS,
) -> dict[str, Any]:
    """Build the widened demo model into ``out_dir`` (the trained model's files, widened weights, config)."""
    b = _build()
    out_dir = Path(out_dir)
    with tempfile.TemporaryDirectory() as tmp:
        b.build_model(Path(tmp))
        small = b.read_float16_safetensors(b.WEIGHTS_PATH) if seed == 0 else None
        if small is None:
            raise WidenError("the widened demo model is built from the trained weights only (seed 0)")
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in ("tokenizer.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json"):
            (out_dir / name).write_bytes((Path(tmp) / name).read_bytes())
        config = json.loads((Path(tmp) / "config.json").read_text())
    wide = widen_weights(small, hidden=hidden, intermediate=intermediate, layers=layers, seed=WIDE_SEED + seed)
    heads = hidden // b.HEAD_DIM
    config.update(
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads // (b.NUM_HEADS // b.NUM_KV_HEADS),
        rms_norm_eps=b.RMS_NORM_EPS * b.HIDDEN_SIZE / hidden,
        torch_dtype=DTYPE,
    )
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    _write_bf16_safetensors(out_dir / "model.safetensors", wide)
    digest, files = b.model_sha256(out_dir)
    params = sum(t.numel() for t in wide.values())
    metadata: dict[str, Any] = {
        "architecture": b.ARCHITECTURE,
        "model_type": "llama",
        "seed": seed,
        "widened_from": "the trained demo model (examples/demo_model/build.py)",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "head_dim": b.HEAD_DIM,
        "parameters": params,
        "dtype": DTYPE,
        "max_model_len": b.MAX_MODEL_LEN,
        "recipe_sha256": recipe_sha256(seed=seed),
        "files": files,
        "sha256": digest,
    }
    (out_dir / b.MANIFEST_NAME).write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return metadata


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the GPU demo model (the trained demo Llama, widened).")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hidden", type=int, default=HIDDEN_SIZE)
    parser.add_argument("--intermediate", type=int, default=INTERMEDIATE_SIZE)
    parser.add_argument("--layers", type=int, default=NUM_LAYERS)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    try:
        meta = build_model(
            args.out, seed=args.seed, hidden=args.hidden, intermediate=args.intermediate, layers=args.layers
        )
    except (WidenError, _build().BuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"built {meta['parameters'] / 1e9:.2f}B parameters ({meta['dtype']}) in {args.out} in "
        f"{time.perf_counter() - t0:.1f}s\nsha256 {meta['sha256']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
