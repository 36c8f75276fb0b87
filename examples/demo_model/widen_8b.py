"""Builder of the GPU demo model at an ~8B shape: the trained demo Llama widened to hidden 4096.

The same construction as ``widen.py`` (the trained model's function in a wider Llama whose extra heads,
units and layers do real work and drop their outputs), at the shape of a Llama-3-8B decoder: hidden size
4096 (64 heads of 64, 32 KV heads), intermediate size 14336 and 32 layers, about 7.3B parameters in
bfloat16. A decode step then streams about 14.6 GB of weights: about 4.4 ms at an H100's 3.35 TB/s, and
6.1-6.2 ms measured per step (batch 1-8), so the step is bound by the GPU's memory, not by the host, and a
kernel change of a few percent shows in the step time. The widened ~1B model (``widen.py``) decodes in
about 1.35 ms, of which streaming its 2 GB takes 0.6 ms: host-bound, with 2-6% of noise between engine
lifetimes.

Deterministic like ``widen.py``; building takes about a minute and 30 GB of host memory (the weights are
drawn in float32). CLI: ``python examples/demo_model/widen_8b.py --out DIR``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

HIDDEN_SIZE = 4096
INTERMEDIATE_SIZE = 14336
NUM_LAYERS = 32


def _widen() -> Any:
    key = "fasttrack_demo_model_widen"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / "widen.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def recipe_sha256(*, seed: int = 0) -> str:
    """What a build depends on: this file, ``widen.py``'s recipe, and the seed."""
    digest = hashlib.sha256()
    digest.update(hashlib.sha256((HERE / "widen_8b.py").read_bytes()).digest())
    digest.update(_widen().recipe_sha256(seed=seed).encode())
    return digest.hexdigest()


def model_sha256(out_dir: Path) -> tuple[str, dict[str, str]]:
    """The sha256 over the built files (as ``widen.py`` hashes them)."""
    return _widen()._build().model_sha256(out_dir)


def build_model(out_dir: Path, *, seed: int = 0) -> dict[str, Any]:
    """Build the ~8B-shaped demo model into ``out_dir``."""
    meta = _widen().build_model(
        out_dir, seed=seed, hidden=HIDDEN_SIZE, intermediate=INTERMEDIATE_SIZE, layers=NUM_LAYERS
    )
    manifest = Path(out_dir) / _widen()._build().MANIFEST_NAME
    meta["recipe_sha256"] = recipe_sha256(seed=seed)
    meta["shape"] = "~8B (Llama-3-8B decoder shape)"
    import json

    manifest.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the ~8B-shaped GPU demo model (the trained demo Llama).")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    meta = build_model(args.out)
    print(
        f"built {meta['parameters'] / 1e9:.2f}B parameters ({meta['dtype']}) in {args.out} in "
        f"{time.perf_counter() - t0:.1f}s\nsha256 {meta['sha256']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
