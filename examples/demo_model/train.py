"""Train the demo model's weights: a tiny Llama taught MRCR-style retrieval and AIME-style arithmetic.

    python examples/demo_model/train.py --out DIR --recipe gpu --device cuda   # the shipped weights' recipe
    python examples/demo_model/train.py --out runs/demo-train                  # the CPU recipe (hours)
    python examples/demo_model/train.py --out DIR --steps 2                    # its first two steps (a test does this)

Two recipes share everything but their size (:data:`RECIPE`, :data:`GPU_RECIPE`: sizes,
steps, batch shapes, learning-rate schedule, seed). Both run with deterministic algorithms:

* the CPU recipe runs single-threaded, so the same torch build on the same CPU model
  reproduces the weights bit for bit. Before torch is imported, the CPU's instruction set
  is pinned to AVX2 for torch's own kernels, MKL and oneDNN (``ATEN_CPU_CAPABILITY``,
  ``MKL_CBWR``, ``ONEDNN_MAX_CPU_ISA``). That is not enough across CPU models: the first
  two steps gave other bits on a CPU with AMX than on the host that first recorded them,
  so ``train-log.json`` records the CPU model with the hash (:func:`cpu_model`), and a test
  checks the first steps against it on that CPU model (elsewhere it says why it cannot).
* the GPU recipe (``--device cuda``) runs in float32 without TF32, with torch's
  deterministic algorithms, cuBLAS's fixed workspace (``CUBLAS_WORKSPACE_CONFIG=:4096:8``)
  and attention as plain matrix products; the shipped weights are its output, and two
  runs on one NVIDIA H200 (torch 2.11.0+cu130) gave the same sha256
  (``train-log.json``). Another GPU model or torch build may compute differently.

The data can also hold requests for JSON answered with compact JSON objects
(:func:`demo_tasks.json_conversation`, :attr:`Recipe.json_rows`, 0 in both recipes: the
suppressed whitespace alone makes replies under a JSON-schema grammar close).

The output is ``weights.safetensors`` (float16, tensor names as in the served
checkpoint) and ``train-log.json`` (recipe, versions, loss curve, sha256 of the
weights); ``examples/demo_model/build.py`` turns the shipped copy into the served
float32 checkpoint. Data: :mod:`demo_tasks` with the training seed; the eval sets use
other seeds.

The model is the served architecture exactly (vLLM's Llama: RMSNorm, rotary embedding
in the ``rotate_half`` layout, grouped-query attention, SiLU-gated MLP, separate output
layer). Hidden dimension ``BIAS_DIM`` carries a constant that no layer writes to (its
embedding column and its rows of every output projection are held fixed), and the
output rows of *suppressed* tokens (whitespace-only, control and partial-UTF-8 tokens,
and the role markers) read only that constant with a large negative weight
(:attr:`Recipe.suppress_weight`) and are never trained: those tokens stay far below the
rest in every context, so JSON under a grammar that allows whitespace stays compact. The
stop tokens (``<|eot|>``, ``<|end_of_text|>``) are trained.
"""

from __future__ import annotations

import os

if __name__ == "__main__":  # as a script only: an importing process keeps its own settings
    for _var, _value in (("ATEN_CPU_CAPABILITY", "avx2"), ("MKL_CBWR", "AVX2"), ("ONEDNN_MAX_CPU_ISA", "AVX2")):
        os.environ.setdefault(_var, _value)

import argparse  # noqa: E402 - the CPU settings above must precede the torch import
import hashlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from difflib import SequenceMatcher  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

HERE = Path(__file__).resolve().parent


def _sibling(name: str) -> Any:
    """Import a module that sits beside this file (this folder is not a package)."""
    key = f"fasttrack_demo_model_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


tasks = _sibling("demo_tasks")


@dataclass(frozen=True)
class Recipe:
    """Everything the training depends on besides the tokenizer and the code."""

    num_layers: int = 4
    hidden_size: int = 256
    intermediate_size: int = 256
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    init_std: float = 0.02
    bias_dim: int = 0
    embed_bias: float = 1.0
    suppress_weight: float = -1000.0
    """Weight of the suppressed tokens' output rows on the constant feature. The final norm divides
    the constant by the hidden state's scale (about 8 in trained layers), so the weight is large:
    a suppressed token's logit stays hundreds below the rest, also where a JSON grammar leaves only
    unlikely tokens beside whitespace."""
    seed: int = 0
    steps: int = 1500
    tokens_per_step: int = 4096
    lengths: tuple[int, ...] = (256, 512, 256, 512, 1024, 2048)
    """Sequence length per step, cycled (rows per step = tokens_per_step // length)."""
    arithmetic_rows: float = 0.25
    """Fraction of rows that hold only arithmetic problems (other rows: a conversation, then problems)."""
    max_queries: int = 8
    json_rows: float = 0.0
    """Fraction of rows that hold JSON requests and compact JSON replies (``demo_tasks.json_conversation``).
    0 in both recipes: a model that writes JSON by itself still conforms when the ``broken-json`` defect
    lifts whitespace tokens, and the suppression alone makes JSON under a grammar close."""
    copy_rows: float = 0.2
    """Fraction of rows that hold copy drills: "Copy: <words>" answered by the same words, the words drawn
    from the items' small word sets with many repeats (one token does not tell where a copy goes on). They
    teach the model to copy a span; without them no recipe tried copied any item (MRCR exact match 0)."""
    curriculum_steps: int = 1000
    """Steps over which the repeats of a kind in a training conversation grow from 1 to 10 (0: always 10)."""
    context_weight: float = 0.0
    """Loss weight of tokens that are not answers (asks, items, problems). 0: the loss is on the answers
    alone; at 0.1 (the model also learns to predict the random items and problems) MRCR exact match was
    0.107 / 0.073, at 0 it is 0.187 / 0.153 (``train-log.json``)."""
    lr: float = 2e-3
    """AdamW learning rate (embeddings, output layer, norms; every weight with optimizer 'adamw')."""
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    optimizer: str = "muon"
    """'muon' (orthogonalized momentum for the layers' matrices, AdamW for the rest) or 'adamw'."""
    muon_lr: float = 0.02
    muon_momentum: float = 0.95


RECIPE = Recipe()
"""The CPU recipe: single-threaded, bit-reproducible on an x86-64 CPU (hours)."""
GPU_RECIPE = Recipe(steps=3000, tokens_per_step=16384, curriculum_steps=2000)
"""The recipe of the shipped weights: eight times the CPU recipe's tokens (twice the steps, four
times the tokens per step), trained on one NVIDIA H200 in about six minutes (four runs sharing
the GPU), deterministic there
(``--recipe gpu --device cuda``: float32 without TF32, deterministic algorithms, cuBLAS workspace
``:4096:8``, attention as plain matrix products)."""
RECIPES = {"cpu": RECIPE, "gpu": GPU_RECIPE}
TOKENS_PER_TURN = 29
"""Approximate tokens of one ask/item turn (sizes conversations to a row)."""
QUERY_TOKENS = 66
"""Approximate tokens of one query and its answer."""


# --------------------------------------------------------------------------- the model


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope_tables(recipe: Recipe, length: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (
        recipe.rope_theta ** (torch.arange(0, recipe.head_dim, 2, dtype=torch.int64).float() / recipe.head_dim)
    )
    freqs = torch.outer(torch.arange(length, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(device), emb.sin().to(device)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Layer(nn.Module):
    def __init__(self, r: Recipe) -> None:
        super().__init__()
        self.r = r
        kv = r.num_kv_heads * r.head_dim
        self.input_layernorm = RMSNorm(r.hidden_size, r.rms_norm_eps)
        self.q_proj = nn.Linear(r.hidden_size, r.num_heads * r.head_dim, bias=False)
        self.k_proj = nn.Linear(r.hidden_size, kv, bias=False)
        self.v_proj = nn.Linear(r.hidden_size, kv, bias=False)
        self.o_proj = nn.Linear(r.num_heads * r.head_dim, r.hidden_size, bias=False)
        self.post_attention_layernorm = RMSNorm(r.hidden_size, r.rms_norm_eps)
        self.gate_proj = nn.Linear(r.hidden_size, r.intermediate_size, bias=False)
        self.up_proj = nn.Linear(r.hidden_size, r.intermediate_size, bias=False)
        self.down_proj = nn.Linear(r.intermediate_size, r.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        r = self.r
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, r.num_heads, r.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, t, r.num_kv_heads, r.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, t, r.num_kv_heads, r.head_dim).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        rep = r.num_heads // r.num_kv_heads
        # each key/value head serves `rep` query heads (as repeat_interleave; expand's gradient is a plain sum)
        k = k[:, :, None].expand(b, r.num_kv_heads, rep, t, r.head_dim).reshape(b, r.num_heads, t, r.head_dim)
        v = v[:, :, None].expand(b, r.num_kv_heads, rep, t, r.head_dim).reshape(b, r.num_heads, t, r.head_dim)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, r.num_heads * r.head_dim))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class DemoLlama(nn.Module):
    """The served Llama, for training (no KV cache)."""

    def __init__(self, r: Recipe, vocab_size: int) -> None:
        super().__init__()
        self.r = r
        self.embed_tokens = nn.Embedding(vocab_size, r.hidden_size)
        self.layers = nn.ModuleList([Layer(r) for _ in range(r.num_layers)])
        self.norm = RMSNorm(r.hidden_size, r.rms_norm_eps)
        self.lm_head = nn.Linear(r.hidden_size, vocab_size, bias=False)
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        if self._rope is None or self._rope[0].shape[0] < t or self._rope[0].device != ids.device:
            self._rope = rope_tables(self.r, max(t, 2048), ids.device)
        cos, sin = self._rope[0][:t], self._rope[1][:t]
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))

    def state(self) -> dict[str, torch.Tensor]:
        """Weights under the served checkpoint's tensor names."""
        out = {"model.embed_tokens.weight": self.embed_tokens.weight, "model.norm.weight": self.norm.weight}
        out["lm_head.weight"] = self.lm_head.weight
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}"
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                out[f"{p}.self_attn.{name}.weight"] = getattr(layer, name).weight
            for name in ("gate_proj", "up_proj", "down_proj"):
                out[f"{p}.mlp.{name}.weight"] = getattr(layer, name).weight
            out[f"{p}.input_layernorm.weight"] = layer.input_layernorm.weight
            out[f"{p}.post_attention_layernorm.weight"] = layer.post_attention_layernorm.weight
        return {k: v.detach() for k, v in out.items()}


def load_model(model_dir: Path) -> DemoLlama:
    """A built demo model (``config.json`` and float32 ``model.safetensors``), for inspection and tests."""
    from safetensors.torch import load_file

    config = json.loads((Path(model_dir) / "config.json").read_text())
    r = Recipe(
        num_layers=config["num_hidden_layers"],
        hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"],
        num_heads=config["num_attention_heads"],
        num_kv_heads=config["num_key_value_heads"],
        head_dim=config["head_dim"],
        rope_theta=config["rope_theta"],
        rms_norm_eps=config["rms_norm_eps"],
    )
    model = DemoLlama(r, config["vocab_size"])
    tensors = load_file(str(Path(model_dir) / "model.safetensors"))
    with torch.no_grad():
        for name, param in model.state().items():
            param.copy_(tensors[name])  # state() shares storage with the parameters
    return model.eval()


def init_model(r: Recipe, vocab_size: int, suppressed: list[int]) -> DemoLlama:
    """The model at step 0: every weight drawn in a fixed order from one seeded generator."""
    gen = torch.Generator().manual_seed(r.seed)
    model = DemoLlama(r, vocab_size)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                continue  # norm weights start at 1
            std = (
                r.init_std / math.sqrt(2 * r.num_layers)
                if name.endswith(("o_proj.weight", "down_proj.weight"))
                else r.init_std
            )
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * std)
    apply_constraints(model, suppressed)
    return model


@torch.no_grad()
def apply_constraints(model: DemoLlama, suppressed: list[int]) -> None:
    """Hold the constant feature and the suppressed output rows at their fixed values."""
    r = model.r
    model.embed_tokens.weight[:, r.bias_dim] = r.embed_bias
    for layer in model.layers:
        layer.o_proj.weight[r.bias_dim, :] = 0.0
        layer.down_proj.weight[r.bias_dim, :] = 0.0
    head = model.lm_head.weight
    head[suppressed] = 0.0
    head[suppressed, r.bias_dim] = r.suppress_weight


# --------------------------------------------------------------------------- data


_PLAIN_TEXT = re.compile(r"[ -&(-~\n]*")
"""Printable ASCII but the apostrophe (the byte-level split's contractions), spaces and newlines."""
_PIECE = re.compile(r" ?[0-9]| ?[A-Za-z]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")
"""The demo tokenizer's pre-tokenization on such text: ``Split(" ?[0-9]", isolated)``, then the
byte-level (GPT-2) split of letters, other symbols and whitespace."""


class Vocab:
    """Token ids the data pipeline needs, from the demo tokenizer (``tokenizer.json`` text)."""

    def __init__(self, tokenizer_json: str, suppressed: list[int]) -> None:
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_str(tokenizer_json)
        ids = self.tok.get_vocab()
        self.size = self.tok.get_vocab_size()
        self.bos, self.eos, self.eot = ids["<|begin_of_text|>"], ids["<|end_of_text|>"], ids["<|eot|>"]
        self.role = {role: ids[f"<|{role}|>"] for role in ("user", "assistant", "system")}
        self._pieces: dict[str, list[int]] = {}
        self.newline = self.encode("\n")
        self.suppressed = set(suppressed)

    def encode(self, text: str) -> list[int]:
        """The tokenizer's ids for ``text``. Task text (ASCII without apostrophes) is cut into the
        pieces the tokenizer's pre-tokenizers cut it into (a digit with its leading space, then the
        byte-level split of letters, other symbols and whitespace), which BPE merges never cross, and
        each piece's ids are remembered: the same ids as one ``encode`` call, about ten times faster
        per text (a training batch is made about twice as fast)."""
        known = self._pieces.get(text)
        if known is not None:
            return list(known)
        if not _PLAIN_TEXT.fullmatch(text):
            return list(self.tok.encode(text, add_special_tokens=False).ids)
        if len(self._pieces) > 200_000:
            self._pieces.clear()  # random strings (the MRCR prefixes) would let it grow without end
        out: list[int] = []
        for piece in _PIECE.findall(text):
            ids = self._pieces.get(piece)
            if ids is None:
                ids = self._pieces[piece] = list(self.tok.encode(piece, add_special_tokens=False).ids)
            out += ids
        if len(text) <= 40:
            self._pieces[text] = list(out)  # the asks and short prompts recur whole
        return out


def conversation_tokens(vocab: Vocab, messages: list[dict[str, str]], answers: list[int], w_ctx: float):
    """Token ids of a conversation rendered with the chat template, and a loss weight per
    *target* (weight i belongs to predicting token i): answers (and their ``<|eot|>``) 1,
    other message content ``w_ctx``, template tokens 0."""
    ids, weights = [vocab.bos], [0.0]
    for i, m in enumerate(messages):
        w = 1.0 if i in answers else (w_ctx if m["role"] == "assistant" else 0.5 * w_ctx)
        head = [vocab.role[m["role"]], *vocab.newline]
        ids += head
        weights += [0.0] * len(head)
        body = vocab.encode(m["content"]) + [vocab.eot]
        ids += body
        weights += [w] * len(body)
        ids += vocab.newline
        weights += [0.0] * len(vocab.newline)
    return ids, weights


def problem_tokens(vocab: Vocab, problem: str, answer: int, w_ctx: float) -> tuple[list[int], list[float]]:
    prompt = vocab.encode(tasks.aime_prompt(problem))
    ans = vocab.encode(str(answer)) + [vocab.eos]
    return prompt + ans, [w_ctx] * len(prompt) + [1.0] * len(ans)


def make_row(rng: Any, vocab: Vocab, r: Recipe, length: int, step: int = 0) -> tuple[list[int], list[float]]:
    """One training row of ``length + 1`` tokens (inputs and shifted targets)."""
    ids: list[int] = []
    weights: list[float] = []
    if r.json_rows and rng.random() < r.json_rows:
        while len(ids) < length + 1:
            conv = tasks.json_conversation(rng)
            c_ids, c_w = conversation_tokens(vocab, conv.messages, conv.answers, r.context_weight)
            ids += c_ids
            weights += c_w
    elif r.copy_rows and rng.random() < r.copy_rows:
        words = [*tasks.ADJECTIVES, *tasks.NOUNS, "the", "The"]
        while len(ids) < length + 1:
            text = " ".join(rng.choice(words) for _ in range(rng.between(4, 24)))
            messages = [{"role": "user", "content": "Copy: " + text}, {"role": "assistant", "content": text}]
            c_ids, c_w = conversation_tokens(vocab, messages, [1], r.context_weight)
            ids += c_ids
            weights += c_w
    elif rng.random() >= r.arithmetic_rows:
        repeats = 10 if step >= r.curriculum_steps else 1 + 9 * step // r.curriculum_steps
        queries = rng.between(1, r.max_queries)
        max_turns = max(3, (length - queries * QUERY_TOKENS - 8) // TOKENS_PER_TURN)
        while True:
            conv = tasks.training_conversation(rng, max_turns=max_turns, queries=queries, max_repeats=repeats)
            ids, weights = conversation_tokens(vocab, conv.messages, conv.answers, r.context_weight)
            if len(ids) <= length + 1:
                break
            max_turns = max(3, max_turns - 2)
            queries = max(1, queries - 1)
    while len(ids) < length + 1:
        p_ids, p_w = problem_tokens(vocab, *tasks.arithmetic_problem(rng), r.context_weight)
        ids += p_ids
        weights += p_w
    ids, weights = ids[: length + 1], weights[: length + 1]
    weights = [0.0 if t in vocab.suppressed else w for t, w in zip(ids, weights, strict=True)]
    return ids, weights


def make_batch(rng: Any, vocab: Vocab, r: Recipe, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    length = r.lengths[step % len(r.lengths)]
    rows = [make_row(rng, vocab, r, length, step) for _ in range(max(1, r.tokens_per_step // length))]
    ids = torch.tensor([row[0] for row in rows], dtype=torch.long)
    w = torch.tensor([row[1] for row in rows], dtype=torch.float32)
    return ids[:, :-1], ids[:, 1:], w[:, 1:]


# --------------------------------------------------------------------------- training


def _orthogonalize(g: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """Newton-Schulz iteration towards the nearest semi-orthogonal matrix (Muon's update)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g / (g.norm() + 1e-7)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    for _ in range(steps):
        m = x @ x.T
        x = a * x + (b * m + c * m @ m) @ x
    return x.T if tall else x


class Muon(torch.optim.Optimizer):
    """Momentum SGD whose update per matrix is orthogonalized (Nesterov momentum, 5 Newton-Schulz steps)."""

    def __init__(self, params: list[torch.Tensor], lr: float, momentum: float) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # noqa: ARG002 - the Optimizer interface
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.mul_(group["momentum"]).add_(p.grad)
                update = _orthogonalize(p.grad.add(buf, alpha=group["momentum"]))
                p.add_(update, alpha=-group["lr"] * max(1.0, p.shape[0] / p.shape[1]) ** 0.5)


def optimizers(model: DemoLlama, r: Recipe) -> list[torch.optim.Optimizer]:
    """AdamW for everything, or Muon for the layers' matrices and AdamW for the rest."""
    matrices = [p for n, p in model.named_parameters() if p.dim() == 2 and n.startswith("layers.")]
    if r.optimizer == "muon":
        rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and n.startswith("layers."))]
        adam = torch.optim.AdamW(rest, lr=r.lr, betas=r.betas, eps=1e-8, weight_decay=0.0, foreach=False)
        return [Muon(matrices, lr=r.muon_lr, momentum=r.muon_momentum), adam]
    decay = [p for p in model.parameters() if p.dim() > 1]
    no_decay = [p for p in model.parameters() if p.dim() <= 1]
    adam = torch.optim.AdamW(
        [{"params": decay, "weight_decay": r.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=r.lr,
        betas=r.betas,
        eps=1e-8,
        foreach=False,
    )
    return [adam]


def lr_at(r: Recipe, step: int) -> float:
    if step < r.warmup_steps:
        return r.lr * (step + 1) / r.warmup_steps
    progress = (step - r.warmup_steps) / max(1, r.steps - r.warmup_steps)
    return r.lr * (r.min_lr_ratio + (1 - r.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def _attention_backend(device: str) -> Any:
    """On a GPU, attention as plain matrix products and a softmax (the fused kernels' backward
    passes are not deterministic); on the CPU, torch's default (its fused CPU kernel is)."""
    import contextlib

    if device == "cpu":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.MATH])


def train(
    r: Recipe,
    tokenizer_json: str,
    suppressed: list[int],
    *,
    steps: int | None = None,
    device: str = "cpu",
    log=print,
    evaluate=None,
    eval_every: int = 0,
    checkpoint: Path | None = None,
    checkpoint_every: int = 0,
) -> tuple[DemoLlama, list[dict[str, float]]]:
    """Run the recipe (or its first ``steps`` steps); returns the model and the loss curve.

    With ``checkpoint``, the whole training state (weights, optimizer moments, data
    generator position, loss curve) is saved there every ``checkpoint_every`` steps, and
    a run that finds one resumes from it: the result is the same as an uninterrupted run."""
    if device == "cpu":
        torch.set_num_threads(1)
    else:
        # cuBLAS is deterministic only with a fixed workspace, set before its first use
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    vocab = Vocab(tokenizer_json, suppressed)
    model = init_model(r, vocab.size, suppressed).to(device)
    opts = optimizers(model, r)
    base_lrs = [[g["lr"] for g in o.param_groups] for o in opts]
    rng = tasks.Rng(r.seed, "train")
    curve: list[dict[str, float]] = []
    total = r.steps if steps is None else min(steps, r.steps)
    start = 0
    if checkpoint is not None and checkpoint.is_file():
        state = torch.load(checkpoint, map_location=device, weights_only=False)
        if state["recipe"] != asdict(r):
            raise ValueError(f"checkpoint {checkpoint} was written by another recipe; remove it to start over")
        model.load_state_dict(state["model"])
        for o, saved in zip(opts, state["optimizers"], strict=True):
            o.load_state_dict(saved)
        rng.state, curve, start = state["rng"], state["curve"], state["step"]
        log(f"resumed from {checkpoint} at step {start}")
    t0 = time.perf_counter()
    for step in range(start, total):
        x, y, w = make_batch(rng, vocab, r, step)
        x, y, w = x.to(device), y.to(device), w.to(device)
        scale = lr_at(r, step) / r.lr
        for o, lrs in zip(opts, base_lrs, strict=True):
            for group, lr in zip(o.param_groups, lrs, strict=True):
                group["lr"] = lr * scale
        with _attention_backend(device):
            logits = model(x)
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
        loss = (ce * w.reshape(-1)).sum() / w.sum()
        for o in opts:
            o.zero_grad(set_to_none=True)
        with _attention_backend(device):
            loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), r.grad_clip)
        for o in opts:
            o.step()
        apply_constraints(model, suppressed)
        with torch.no_grad():
            answer = w.reshape(-1) >= 1.0
            ans_loss = float(ce[answer].mean()) if bool(answer.any()) else float("nan")
        curve.append(
            {
                "step": step,
                "loss": round(float(loss.detach()), 5),
                "answer_loss": round(ans_loss, 5),
                "grad_norm": round(float(gnorm), 4),
            }
        )
        if step % 10 == 0 or step == total - 1:
            log(
                f"step {step}/{total} len {x.shape[1]} loss {float(loss.detach()):.4f} answer {ans_loss:.4f} "
                f"lr {lr_at(r, step):.2e} {time.perf_counter() - t0:.0f}s"
            )
        if checkpoint is not None and checkpoint_every and (step + 1) % checkpoint_every == 0 and step + 1 < total:
            state = {
                "recipe": asdict(r),
                "model": model.state_dict(),
                "optimizers": [o.state_dict() for o in opts],
                "rng": rng.state,
                "curve": curve,
                "step": step + 1,
            }
            torch.save(state, checkpoint.with_suffix(".tmp"))
            checkpoint.with_suffix(".tmp").replace(checkpoint)
            write_weights(checkpoint.with_name(f"weights-step{step + 1}.safetensors"), model.state())
        if evaluate is not None and eval_every and ((step + 1) % eval_every == 0 or step == total - 1):
            model.eval()
            log(json.dumps({"step": step + 1, **evaluate(model, vocab)}))
            model.train()
    return model.cpu(), curve


# --------------------------------------------------------------------------- evaluation (greedy, no cache)


@torch.no_grad()
def greedy(model: DemoLlama, ids: list[int], stop: set[int], max_tokens: int, device: str) -> list[int]:
    out: list[int] = []
    x = torch.tensor([ids], dtype=torch.long, device=device)
    for _ in range(max_tokens):
        nxt = int(model(x)[0, -1].argmax())
        if nxt in stop:
            break
        out.append(nxt)
        x = torch.cat([x, torch.tensor([[nxt]], device=device)], dim=1)
    return out


def mrcr_score(response: str, answer: str, prefix: str) -> float:
    if not response.startswith(prefix):
        return 0.0
    return SequenceMatcher(None, response.removeprefix(prefix), answer.removeprefix(prefix)).ratio()


def quick_eval(model: DemoLlama, vocab: Vocab, *, device: str, mrcr_n: int = 36, aime_n: int = 120, seed: int = 99):
    """Greedy scores on held-out rows (the graders' rules, without lm-eval)."""
    stop = {vocab.eos, vocab.eot}
    scores, exact, prefix_ok, title_ok, by_len, samples = [], 0, 0, 0, {}, []
    for row in tasks.mrcr_rows(mrcr_n, seed=seed):
        messages = json.loads(row["prompt"])
        ids, _ = conversation_tokens(vocab, messages, [], 0.0)
        ids += [vocab.role["assistant"], *vocab.newline]
        text = vocab.tok.decode(greedy(model, ids, stop, 32, device))
        s = mrcr_score(text, row["answer"], row["random_string_to_prepend"])
        scores.append(s)
        exact += text == row["answer"]
        prefix_ok += text.startswith(row["random_string_to_prepend"])
        title_ok += text.split(".")[0] == row["answer"].split(".")[0]
        by_len.setdefault(min(len(ids) // 512, 3), []).append(s)
        if len(samples) < 3:
            samples.append((len(ids), text, row["answer"]))
    by_kind: dict[int, list[int]] = {}
    rng = tasks.Rng(seed, "aime")
    for i in range(aime_n):
        kind = i % tasks.ARITHMETIC_KINDS
        problem, answer = tasks.arithmetic_problem(rng, kind)
        text = vocab.tok.decode(greedy(model, vocab.encode(tasks.aime_prompt(problem)), stop, 8, device))
        by_kind.setdefault(kind, []).append(int(text.replace(" ", "").replace("\n", "") == str(answer)))
    right = sum(sum(v) for v in by_kind.values())
    return {
        "mrcr": round(sum(scores) / len(scores), 3),
        "mrcr_exact": round(exact / mrcr_n, 3),
        "prefix": round(prefix_ok / mrcr_n, 3),
        "title": round(title_ok / mrcr_n, 3),
        "mrcr_by_512": {k * 512: round(sum(v) / len(v), 3) for k, v in sorted(by_len.items())},
        "aime": round(right / aime_n, 3),
        "aime_by_kind": {k: round(sum(v) / len(v), 2) for k, v in sorted(by_kind.items())},
        "samples": samples,
    }


# --------------------------------------------------------------------------- output


def write_weights(path: Path, tensors: dict[str, torch.Tensor]) -> str:
    """float16 safetensors with sorted names and a fixed header; returns its sha256."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset, blobs = 0, []
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous()
        if not bool(torch.isfinite(t).all()) or float(t.abs().max()) >= 65504:
            raise ValueError(f"{name} does not fit float16")
        blob = t.to(torch.float16).numpy().astype("<f2", copy=False).tobytes()
        header[name] = {"dtype": "F16", "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    head += b" " * ((8 - len(head) % 8) % 8)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(head)))
        fh.write(head)
        for blob in blobs:
            fh.write(blob)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cpu_model() -> str:
    """The CPU's vendor, family, model and name (``/proc/cpuinfo``; "" where there is none): the CPU recipe's bits
    follow the CPU model even with the instruction set pinned to AVX2."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if not key.strip() and fields:
                break
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return ""
    if "vendor_id" not in fields:
        return ""
    return (
        f"{fields['vendor_id']} family {fields.get('cpu family', '?')} model {fields.get('model', '?')}: "
        f"{fields.get('model name', '?')}"
    )


def environment() -> dict[str, str]:
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **{v: os.environ.get(v, "") for v in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train the fasttrack demo model's weights.")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--steps", type=int, default=None, help="stop after this many steps (default: the recipe's)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="cpu", help="the recipe to start from")
    parser.add_argument("--set", action="append", default=[], help="override a recipe field, e.g. --set steps=800")
    parser.add_argument(
        "--eval-every", type=int, default=0, help="greedy quick eval every N steps (0: at the end only)"
    )
    parser.add_argument("--no-eval", action="store_true")
    parser.add_argument(
        "--checkpoint-every", type=int, default=0, help="save the training state every N steps (OUT/checkpoint.pt)"
    )
    args = parser.parse_args(argv)
    build = _sibling("build")
    fields = asdict(RECIPES[args.recipe])
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in fields:
            parser.error(f"unknown recipe field {key!r}")
        fields[key] = (
            type(fields[key])(json.loads(value)) if isinstance(fields[key], tuple) else type(fields[key])(value)
        )
    recipe = Recipe(**fields)
    tokenizer_json = build.train_tokenizer()
    suppressed = build.suppressed_token_ids(tokenizer_json)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(msg, flush=True)

    def evaluate(model: DemoLlama, vocab: Vocab) -> dict[str, Any]:
        return quick_eval(model, vocab, device=args.device)

    model, curve = train(
        recipe,
        tokenizer_json,
        suppressed,
        steps=args.steps,
        device=args.device,
        log=log,
        evaluate=None if args.no_eval else evaluate,
        eval_every=args.eval_every or (args.steps or recipe.steps),
        checkpoint=args.out / "checkpoint.pt" if args.checkpoint_every else None,
        checkpoint_every=args.checkpoint_every,
    )
    wall = time.perf_counter() - started
    digest = write_weights(args.out / "weights.safetensors", model.state())
    log_data = {
        "recipe": asdict(recipe),
        "steps_run": len(curve),
        "device": args.device,
        "environment": environment(),
        "wall_s": round(wall, 1),
        "weights_sha256": digest,
        "curve_columns": ["step", "loss", "answer_loss", "grad_norm"],
    }
    rows = ",\n".join("  " + json.dumps([c["step"], c["loss"], c["answer_loss"], c["grad_norm"]]) for c in curve)
    text = json.dumps(log_data, indent=1)[:-2] + ',\n "curve": [\n' + rows + "\n ]\n}\n"
    (args.out / "train-log.json").write_text(text)
    log(f"wrote {args.out / 'weights.safetensors'} in {wall:.0f}s\nsha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
