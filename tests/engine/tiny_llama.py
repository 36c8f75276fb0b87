"""A tiny Llama model for engine tests, built locally and deterministically.

Used by ``tests/conftest.py`` only when the demo model builder
(``examples/demo_model/build.py``) is not available. Head size 64 (the CPU
attention backend rejects smaller heads), a byte-level BPE tokenizer trained on a
few fixed lines, random weights from a fixed seed, and an output layer scaled so
next-token distributions are peaked.
"""

from __future__ import annotations

import json
from pathlib import Path

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A fast path must prove that it ran, and that it is correct.",
    "Decode batches are small; prefill batches are large.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20.",
    '{"name": "fasttrack", "ok": true, "count": 3, "items": ["a", "b"]}',
    "Once upon a time there was a tiny model that answered every question.",
    "def add(a, b):\n    return a + b\n",
    "Hello! How are you today? I am fine, thank you.",
]

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

SPECIAL_TOKENS = ["<|begin|>", "<|end|>", "<|pad|>", "<|system|>", "<|user|>", "<|assistant|>"]


def build_tiny_llama(
    out_dir: Path,
    *,
    hidden_size: int = 256,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 512,
    vocab_size: int = 512,
    lm_head_scale: float = 12.0,
    seed: int = 0,
) -> Path:
    """Write config, tokenizer and safetensors weights of a tiny Llama into ``out_dir``."""
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    head_dim = 64

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    tok.save(str(out_dir / "tokenizer.json"))
    real_vocab = tok.get_vocab_size()
    bos_id = tok.token_to_id("<|begin|>")
    eos_id = tok.token_to_id("<|end|>")
    pad_id = tok.token_to_id("<|pad|>")

    (out_dir / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<|begin|>",
                "eos_token": "<|end|>",
                "pad_token": "<|pad|>",
                "add_bos_token": True,
                "model_max_length": 2048,
                "chat_template": CHAT_TEMPLATE,
            },
            indent=2,
            sort_keys=True,
        )
    )
    (out_dir / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<|begin|>", "eos_token": "<|end|>", "pad_token": "<|pad|>"}, indent=2)
    )
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": real_vocab,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "attention_bias": False,
        "mlp_bias": False,
    }
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    (out_dir / "generation_config.json").write_text(
        json.dumps({"bos_token_id": bos_id, "eos_token_id": eos_id, "pad_token_id": pad_id}, indent=2)
    )

    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape: int, std: float = 0.02) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * std).contiguous()

    q_out = num_heads * head_dim
    kv_out = num_kv_heads * head_dim
    tensors: dict[str, torch.Tensor] = {"model.embed_tokens.weight": rnd(real_vocab, hidden_size, std=1.0)}
    for i in range(num_layers):
        p = f"model.layers.{i}."
        tensors[p + "self_attn.q_proj.weight"] = rnd(q_out, hidden_size, std=hidden_size**-0.5)
        tensors[p + "self_attn.k_proj.weight"] = rnd(kv_out, hidden_size, std=hidden_size**-0.5)
        tensors[p + "self_attn.v_proj.weight"] = rnd(kv_out, hidden_size, std=hidden_size**-0.5)
        tensors[p + "self_attn.o_proj.weight"] = rnd(hidden_size, q_out, std=q_out**-0.5)
        tensors[p + "mlp.gate_proj.weight"] = rnd(intermediate_size, hidden_size, std=hidden_size**-0.5)
        tensors[p + "mlp.up_proj.weight"] = rnd(intermediate_size, hidden_size, std=hidden_size**-0.5)
        tensors[p + "mlp.down_proj.weight"] = rnd(hidden_size, intermediate_size, std=intermediate_size**-0.5)
        tensors[p + "input_layernorm.weight"] = torch.ones(hidden_size)
        tensors[p + "post_attention_layernorm.weight"] = torch.ones(hidden_size)
    tensors["model.norm.weight"] = torch.ones(hidden_size)
    tensors["lm_head.weight"] = rnd(real_vocab, hidden_size, std=hidden_size**-0.5) * (lm_head_scale / 4.0)
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    return out_dir


if __name__ == "__main__":  # pragma: no cover - manual use
    import sys

    print(build_tiny_llama(Path(sys.argv[1])))
