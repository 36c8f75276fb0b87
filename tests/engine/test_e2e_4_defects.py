"""A planted defect reaches the session's candidate engine, and path evidence catches it.

(That ``FASTTRACK_DEMO_DEFECT`` set where fasttrack runs reaches the engines it starts is shown by the
``fasttrack validate`` end-to-end tests, whose bundles fail by the defect.)"""

from __future__ import annotations

import asyncio

import pytest

from fasttrack.engine import ProfilerWindow, Request

pytestmark = pytest.mark.e2e


def test_silent_fallback_decode_windows_have_no_optimized_ops(
    silent_fallback_engine, engine_slot, demo_path_markers
) -> None:
    env = silent_fallback_engine.environment()
    # the session's candidate takes its defect from the demo plugin's defect file, set for this test
    assert env.env_overrides.get("FASTTRACK_DEMO_DEFECT_FILE") == str(engine_slot.defect_file)
    assert engine_slot.defect_file.read_text() == "silent-fallback"
    assert "FASTTRACK_DEMO_DEFECT" not in env.env_relevant

    async def go():
        async with silent_fallback_engine.client() as c:
            await c.complete("warm up", max_tokens=2, temperature=0.0)
            async with ProfilerWindow(
                silent_fallback_engine,
                "silent-fallback-decode-b4",
                markers=demo_path_markers.marker_set(),
                fallback_pattern=demo_path_markers.fallback_pattern,
            ) as win:
                await c.gather(
                    [
                        Request.completion(f"Story {i}:", max_tokens=16, temperature=0.0, ignore_eos=True)
                        for i in range(4)
                    ]
                )
        return win.evidence

    ev = asyncio.run(go())
    assert ev is not None
    assert ev.decode_steps >= 14
    assert ev.optimized_ops == 0 and ev.optimized_decode_steps == 0
    assert ev.optimized_decode_fraction == 0.0
    assert ev.stock_step_counts.get("decode") == ev.decode_steps  # every decode step ran the stock path
    # the defect claims the fast path and logs nothing for the decode steps it diverts
    assert not any("reason=batch_out_of_range" in line for line in ev.fallback_lines)
