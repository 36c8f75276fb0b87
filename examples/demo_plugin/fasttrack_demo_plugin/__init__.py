"""Example fast-path vLLM plugin for the fasttrack demo model.

Installing this package registers, through the ``vllm.general_plugins`` entry
point, the architecture ``FasttrackDemoLlamaForCausalLM``: vLLM's stock Llama
model with an opt-in ``latency_specialized`` decode backend, shaped like the
Kimi K3 design (switch in the engine configuration, decode-only batches inside a
declared batch range, visible fallback to the stock path for everything else).

Enable it with ``--additional-config '{"decode_backend": "latency_specialized"}'``.
Without that flag the model runs vLLM's stock Llama code path unchanged.

It also gives vLLM's CPU rejection sampler the synthetic acceptance the CPU build lacks
(``cpu_synthetic``), on both paths alike, so speculative groups with a synthetic
acceptance length run on this CPU target.
"""

from __future__ import annotations

ARCHITECTURE = "FasttrackDemoLlamaForCausalLM"
"""Architecture name the demo model's ``config.json`` declares."""

__all__ = ["ARCHITECTURE", "register"]


def register() -> None:
    """Entry point for ``vllm.general_plugins``; safe to call more than once."""
    from vllm import ModelRegistry

    from fasttrack_demo_plugin import cpu_synthetic

    cpu_synthetic.install()
    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, "fasttrack_demo_plugin.model:FasttrackDemoLlamaForCausalLM")
