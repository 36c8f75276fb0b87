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
    _register_deployment_check()


def _register_deployment_check() -> None:
    """Refuse an unsupported deployment when vLLM builds its configuration (in the API server, seconds
    after the start), not only when the model is built in the worker after every process has started:
    vLLM runs the per-architecture hook of ``MODELS_CONFIG_MAP`` from ``VllmConfig.__post_init__``.
    Quantization is known only later (``quant_config``); the model's own check still refuses it."""
    from vllm.model_executor.models.config import MODELS_CONFIG_MAP, VerifyAndUpdateConfig

    class DemoDeploymentCheck(VerifyAndUpdateConfig):
        @staticmethod
        def verify_and_update_config(vllm_config) -> None:  # type: ignore[no-untyped-def]  # vLLM's hook
            from fasttrack_demo_plugin.settings import check_envelope, parse_settings

            if parse_settings(vllm_config.additional_config).enabled:
                check_envelope(vllm_config)

    MODELS_CONFIG_MAP.setdefault(ARCHITECTURE, DemoDeploymentCheck)
