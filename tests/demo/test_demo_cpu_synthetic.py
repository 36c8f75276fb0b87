"""The demo plugin's synthetic acceptance for vLLM's CPU rejection sampler (no engine): the synthetic branch
of vLLM's rejection kernels, written out in torch, and its installation over vLLM's CPU stand-ins."""

from __future__ import annotations

import pytest

pytest.importorskip("fasttrack_demo_plugin", reason="the demo plugin is not installed")
torch = pytest.importorskip("torch")

from fasttrack_demo_plugin import cpu_synthetic  # noqa: E402 - after the importorskip above

PAD = -1


def _run(drafts: list[list[int]], uniform: list[list[float]], rates: list[float], rows: list[bool]) -> list[list[int]]:
    k = len(rates)
    flat = [t for d in drafts for t in d]
    cu, n = [], 0
    for d in drafts:
        n += len(d)
        cu.append(n)
    out = torch.full((len(drafts), k + 1), PAD, dtype=torch.int32)
    cpu_synthetic.accept_synthetic(
        out,
        torch.tensor(cu),
        torch.tensor(flat, dtype=torch.int32),
        torch.tensor([100 + i for i in range(len(flat))]),  # the replacement (argmax / recovered) per position
        torch.tensor([[900 + i] for i in range(len(drafts))]),
        torch.tensor([u for us in uniform for u in us], dtype=torch.float64),
        torch.tensor(rates),
        rows,
    )
    return out.tolist()


def test_drafts_are_accepted_at_the_rates_and_the_first_rejection_takes_the_replacement() -> None:
    rates = [1.0, 0.5, 0.0]  # vLLM's rates for acceptance length 2.5 at 3 draft tokens
    out = _run([[11, 12, 13], [21, 22, 23]], [[0.9, 0.4, 0.0], [0.1, 0.7, 0.0]], rates, [True, True])
    # request 0: positions 0 and 1 accepted, position 2 (rate 0) rejected -> replacement of flat index 2
    assert out[0] == [11, 12, 102, PAD]
    # request 1: position 1 rejected (0.7 >= 0.5) -> replacement of flat index 4; nothing after it
    assert out[1] == [21, 104, PAD, PAD]


def test_all_accepted_appends_the_bonus_token_and_padded_drafts_are_never_accepted() -> None:
    out = _run([[11, 12], [PAD, 22]], [[0.0, 0.0], [0.0, 0.0]], [1.0, 1.0], [True, True])
    assert out[0] == [11, 12, 900]
    assert out[1] == [102, PAD, PAD]


def test_rows_not_selected_are_left_alone_and_requests_without_drafts_get_the_bonus() -> None:
    out = _run([[11], [], [31]], [[0.0], [], [0.0]], [1.0], [False, True, True])
    assert out[0] == [PAD, PAD]  # the other kernel handles this request
    assert out[1] == [901, PAD]
    assert out[2] == [31, 902]


def test_the_mean_acceptance_length_is_the_configured_one() -> None:
    gen = torch.Generator().manual_seed(0)
    rates = [1.0, 0.5, 0.0]
    n = 2000
    uniform = torch.rand((n, 3), generator=gen, dtype=torch.float64).tolist()
    out = _run([[1, 2, 3]] * n, uniform, rates, [True] * n)
    accepted = sum(sum(1 for t, d in zip(row[:3], (1, 2, 3), strict=True) if t == d) for row in out)
    assert abs(1 + accepted / n - 2.5) < 0.05


def test_install_wraps_vllms_cpu_stand_ins_once_and_leaves_the_plain_path_to_them(monkeypatch) -> None:
    cpu_tl = pytest.importorskip("vllm.utils.cpu_triton_utils")
    calls: list[tuple] = []

    def greedy(*args):
        calls.append(("greedy", args[-1]))

    def random(*args):
        calls.append(("random", args[-1]))

    monkeypatch.setattr(cpu_tl, "_rejection_greedy_sample_kernel_impl", greedy)
    monkeypatch.setattr(cpu_tl, "_rejection_random_sample_kernel_impl", random)
    assert cpu_synthetic.install() and cpu_synthetic.install()
    wrapped = cpu_tl._rejection_greedy_sample_kernel_impl
    assert wrapped is not greedy and getattr(wrapped, "__wrapped__", None) is greedy  # wrapped once, not twice
    # not synthetic: vLLM's own stand-in runs, with every argument as given
    out = torch.zeros((1, 2), dtype=torch.int32)
    wrapped(out, torch.tensor([1]), torch.tensor([5]), torch.tensor([7]), torch.tensor([[9]]), None, 1)
    assert calls == [("greedy", False)]
    # synthetic: the torch branch runs instead (vLLM's stand-in would stop with an AssertionError)
    wrapped(
        out,
        torch.tensor([1]),
        torch.tensor([5], dtype=torch.int32),
        torch.tensor([7]),
        torch.tensor([[9]]),
        None,
        1,
        torch.tensor([0.0], dtype=torch.float64),
        torch.tensor([1.0]),
        True,
    )
    assert calls == [("greedy", False)] and out.tolist() == [[5, 9]]
