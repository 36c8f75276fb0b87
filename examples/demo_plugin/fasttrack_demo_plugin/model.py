"""``FasttrackDemoLlamaForCausalLM``: vLLM's stock Llama with an opt-in
``latency_specialized`` decode backend.

- Backend off (default): the class builds vLLM's own ``LlamaDecoderLayer`` and
  inherits ``forward`` and ``compute_logits`` unchanged; nothing of this plugin
  runs per step.
- Backend on (``--additional-config '{"decode_backend": "latency_specialized"}'``):
  the eager outer ``forward`` plans each step (see ``dispatch.py``). Fast steps
  (decode-only, batch in range) bypass vLLM's compiled ``LlamaModel``: the outer
  ``forward`` runs, per layer, ``fasttrack_demo::fused_decode_qkv_rope``, vLLM's
  attention kernel and ``fasttrack_demo::fused_decode_mlp``, and the output layer
  runs ``fasttrack_demo::fused_decode_logits`` (in float32 the two per-layer blocks
  run as native kernels, ``..._f32``; see ``ops.py``). Every other step marks itself with
  ``fasttrack_demo::stock_step`` and runs vLLM's compiled ``LlamaModel`` (with vLLM's
  unmodified decoder layers) and the stock ``compute_logits``. Embedding,
  final norm and sampling are always stock.

Envelope (checked at startup; anything else is rejected with an error): tensor
and pipeline parallel size 1, no quantization, no LoRA; speculative decoding only
with n-gram drafting, whose verify steps (several query tokens per request) run the
stock path, logged with reason ``spec_verify``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from typing import Any

import torch
from vllm.forward_context import get_forward_context, is_forward_context_available
from vllm.model_executor.models.llama import LlamaDecoderLayer, LlamaForCausalLM

from fasttrack_demo_plugin import ops
from fasttrack_demo_plugin.dispatch import Dispatcher, logger
from fasttrack_demo_plugin.settings import (
    DEFECT_ENV,
    BackendSettings,
    check_defect_device,
    check_envelope,
    parse_settings,
)


class FastDecodeLlamaDecoderLayer(LlamaDecoderLayer):
    """vLLM's stock Llama decoder layer (its ``forward`` is inherited, and compiled with
    the stock model) plus the optimized path's own weight copies for fast steps."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        prefix = kwargs.get("prefix", "")
        self.layer_index = int(prefix.rsplit(".", 1)[-1]) if prefix else 0
        self.fast_w_qkv_t: torch.Tensor | None = None
        self.fast_w_o_t: torch.Tensor | None = None
        self.fast_w_gate_up_t: torch.Tensor | None = None
        self.fast_w_down_t: torch.Tensor | None = None
        self.fast_handles: dict[str, torch.Tensor | None] = {}

    def capture_fast_weights(self) -> None:
        """Keep the optimized path's own pre-transposed weight copies (vLLM's CPU
        linear layers drop ``.weight`` after packing it for their own kernels) and
        pack them into the optimized path's own oneDNN GEMM handles."""
        self.fast_w_qkv_t = _transposed(self.self_attn.qkv_proj.weight)
        self.fast_w_o_t = _transposed(self.self_attn.o_proj.weight)
        self.fast_w_gate_up_t = _transposed(self.mlp.gate_up_proj.weight)
        self.fast_w_down_t = _transposed(self.mlp.down_proj.weight)
        for w in (self.fast_w_qkv_t, self.fast_w_o_t, self.fast_w_gate_up_t):
            ops.prepack(w)
        ops.prepack(self.fast_w_down_t, (1, *ops.SPLIT_K_COUNTS))
        # looked up once here, not on every step (None where oneDNN could not pack: at::mm then)
        self.fast_handles = {
            name: ops.handle(getattr(self, f"fast_w_{name}_t")) for name in ("qkv", "o", "gate_up", "down")
        }


class FasttrackDemoLlamaForCausalLM(LlamaForCausalLM):
    """The demo architecture (see the module docstring)."""

    def __init__(self, *, vllm_config, prefix: str = "") -> None:
        settings = parse_settings(vllm_config.additional_config)
        if settings.enabled:
            check_envelope(vllm_config)
            spec = getattr(vllm_config, "speculative_config", None)
            if spec is not None:
                settings = dataclasses.replace(settings, spec_tokens=int(spec.num_speculative_tokens))
        cuda = _on_cuda()
        if settings.enabled:
            check_defect_device(settings.defect, "cuda" if cuda else "cpu", DEFECT_ENV)
        layer_type = FastDecodeLlamaDecoderLayer if settings.enabled and not cuda else LlamaDecoderLayer
        super().__init__(vllm_config=vllm_config, prefix=prefix, layer_type=layer_type)
        self.fast_settings: BackendSettings = settings
        self.dispatcher: Dispatcher | None = None
        self.cuda_path: Any = None
        self.fast_w_lm_t: torch.Tensor | None = None
        if settings.enabled and cuda:
            from fasttrack_demo_plugin.cuda_path import CudaFastPath

            # the CUDA fast path polls the defect file itself (the model's forward does not run on graph replays)
            self.dispatcher = Dispatcher(dataclasses.replace(settings, defect_file=None))
            self.cuda_path = CudaFastPath(
                torch.device("cuda", torch.cuda.current_device()),
                settings.defect,
                settings.defect_file,
                slow_factor=settings.slow_factor,
            )
            logger.info(
                "fasttrack-demo decode_backend=latency_specialized enabled on CUDA batch_range=%d..%d "
                "(Triton fused add + RMSNorm; device counters fasttrack_demo_device_fast_steps/_stock_steps)",
                settings.min_batch,
                settings.max_batch,
            )
        elif settings.enabled:
            self.dispatcher = Dispatcher(settings)
            ops.set_dispatcher(self.dispatcher)
            if settings.defect == "broken-json" or settings.defect_file:
                ops.set_whitespace_ids(_whitespace_token_ids(vllm_config.model_config.tokenizer))
            logger.info(
                "fasttrack-demo decode_backend=latency_specialized enabled batch_range=%d..%d",
                settings.min_batch,
                settings.max_batch,
            )
            if settings.spec_tokens:
                logger.info(
                    "fasttrack-demo n-gram speculative decoding (%d draft tokens): steps that verify drafts run "
                    "the stock path (fallback reason=spec_verify)",
                    settings.spec_tokens,
                )
            ops.load_native()
            logger.info("fasttrack-demo %s", ops.native_status())
            logger.debug("fasttrack-demo planted defect: %s", settings.defect)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors=None,
        inputs_embeds: torch.Tensor | None = None,
    ):
        if self.dispatcher is not None and self.cuda_path is not None:
            from fasttrack_demo_plugin import cuda_path

            attn_metadata = get_forward_context().attn_metadata if is_forward_context_available() else None
            plan = self.dispatcher.plan_step(attn_metadata)
            return cuda_path.forward(
                self,
                self.cuda_path,
                plan,
                lambda: super(FasttrackDemoLlamaForCausalLM, self).forward(
                    input_ids, positions, intermediate_tensors, inputs_embeds
                ),
                input_ids,
                positions,
                inputs_embeds,
                attn_metadata,
            )
        if self.dispatcher is not None:
            attn_metadata = get_forward_context().attn_metadata if is_forward_context_available() else None
            if self.dispatcher.plan_step(attn_metadata).fast:
                return self._fast_forward(input_ids, positions, inputs_embeds)
            torch.ops.fasttrack_demo.stock_step(positions)
        return super().forward(input_ids, positions, intermediate_tensors, inputs_embeds)

    def _fast_forward(
        self, input_ids: torch.Tensor | None, positions: torch.Tensor, inputs_embeds: torch.Tensor | None
    ) -> torch.Tensor:
        """A fast decode step, eagerly, layer by layer (the stock ``LlamaModel.forward``
        with each layer's body replaced by the fused ops)."""
        model = self.model
        hidden = inputs_embeds if inputs_embeds is not None else model.embed_input_ids(input_ids)
        residual = None
        for layer in model.layers[model.start_layer : model.end_layer]:
            hidden, residual = ops.fast_decoder_layer(layer, self.dispatcher, positions, hidden, residual)
        hidden, _ = model.norm(hidden, residual)
        ops.maybe_slow_step(self.dispatcher)  # the planted slow-batch defect, once per step
        return hidden

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        if self.cuda_path is not None:
            # outside the CUDA graphs, once per step: the device counters to the host, the defect file
            self.cuda_path.after_step(int(hidden_states.shape[0]))
            return super().compute_logits(hidden_states)
        dispatcher = self.dispatcher
        if dispatcher is not None and dispatcher.current.fast and self.fast_w_lm_t is not None:
            if hidden_states.shape[0] == dispatcher.current.batch:
                return torch.ops.fasttrack_demo.fused_decode_logits(hidden_states, self.fast_w_lm_t)
        return super().compute_logits(hidden_states)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        loaded = super().load_weights(weights)
        if self.fast_settings.enabled and self.cuda_path is None:
            for layer in self.model.layers:
                if isinstance(layer, FastDecodeLlamaDecoderLayer):
                    layer.capture_fast_weights()
            self.fast_w_lm_t = _transposed(self.lm_head.weight[: self.config.vocab_size])
            ops.prepack(self.fast_w_lm_t)
        return loaded


def _on_cuda() -> bool:
    """Whether the model is built for a CUDA device (vLLM builds it under the target device)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cuda())


def _transposed(weight: torch.Tensor) -> torch.Tensor:
    return weight.detach().t().contiguous()


def _whitespace_token_ids(tokenizer_path: str) -> torch.Tensor:
    """Ids of tokens that decode to whitespace only."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(os.path.join(tokenizer_path, "tokenizer.json"))
    ids = [
        i
        for i in range(tokenizer.get_vocab_size())
        if (text := tokenizer.decode([i], skip_special_tokens=True)) and not text.strip()
    ]
    return torch.tensor(ids, dtype=torch.long)
