"""What a scope written by someone else may hand the engines (``fasttrack reproduce`` of a bundle).

A bundle records the scope it ran, and ``reproduce`` starts engines from it on the machine of whoever
reruns it, often a maintainer. Engine environment variables and a few vLLM arguments load code or pick
paths: ``PYTHONPATH``, ``LD_PRELOAD``, ``PYTHONWARNINGS`` (it imports the warning category's module),
``BROWSER``, ``VLLM_PLUGINS``, ``VLLM_LOGGING_CONFIG_PATH`` (a logging config instantiates classes),
``--worker-cls``, ``--middleware``, ``--trust-remote-code``... So a recorded scope's engine environment
passes only this allow-list:

- ``VLLM_*``, except variables that load code or name a path, a host or a credential: names ending in
  ``_PATH``, ``_DIR``, ``_ROOT``, ``_FILE``, ``_FOLDER``, ``_CACHE``, ``_SO``, ``_URL``, ``_URI``,
  ``_HOST``, ``_IP``, ``_PORT``, ``_ADDR``, ``_ENDPOINT``, ``_KEY`` or ``_TOKEN``, names holding
  ``PLUGIN``, ``LOGGING_CONFIG``, ``SERIALIZ``, ``PICKLE``, ``AOT``, ``MODELSCOPE``, ``PROFILER`` or
  ``DEV_MODE``, and :data:`DENIED_VLLM`;
- ``HF_*`` under the same exceptions (``HF_HOME``, ``HF_ENDPOINT``, ``HF_TOKEN``... are refused);
- the device and thread settings in :data:`ALLOWED_EXACT` (``CUDA_VISIBLE_DEVICES`` and the like).

The arguments in :data:`CODE_LOADING_ARGS` are refused wherever the scope lists engine arguments.
Anything refused stops ``reproduce`` before anything runs, naming each variable or argument, unless
the user passes ``--trust-bundle-env`` after reading them. ``validate`` runs the user's own scope and
applies none of this.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: Device and thread settings a scope may need, by exact name.
ALLOWED_EXACT = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "CUDA_LAUNCH_BLOCKING",
        "CUDA_MODULE_LOADING",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "TOKENIZERS_PARALLELISM",
        "PYTORCH_CUDA_ALLOC_CONF",
        "NCCL_DEBUG",
        "NCCL_P2P_DISABLE",
        "NCCL_IB_DISABLE",
        "NCCL_NVLS_ENABLE",
        "NCCL_CUMEM_ENABLE",
    }
)
#: Prefixes of the engine's own settings (under the exceptions below).
ALLOWED_PREFIXES = ("VLLM_", "HF_")
#: Name endings of variables that name a path, a library, a host or a credential.
DENIED_SUFFIXES = (
    "_PATH",
    "_DIR",
    "_ROOT",
    "_FILE",
    "_FOLDER",
    "_CACHE",
    "_SO",
    "_URL",
    "_URI",
    "_HOST",
    "_IP",
    "_PORT",
    "_ADDR",
    "_ENDPOINT",
    "_KEY",
    "_TOKEN",
    "_HOME",
)
#: Name parts of variables that load code or change what the harness relies on.
DENIED_PARTS = ("PLUGIN", "LOGGING_CONFIG", "SERIALIZ", "PICKLE", "AOT", "MODELSCOPE", "PROFILER", "DEV_MODE")
#: ``VLLM_*`` variables refused by name besides the rules above.
DENIED_VLLM = frozenset(
    {
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING",  # serves an endpoint that loads adapters from any path
        "VLLM_TEST_FORCE_LOAD_FORMAT",  # picks the weight loader (pickle-based formats included)
        "VLLM_MEDIA_URL_ALLOW_REDIRECTS",
    }
)
#: vLLM server arguments that import code, run it, or read or write a path of their own choosing.
CODE_LOADING_ARGS = frozenset(
    {
        "--trust-remote-code",
        "--worker-cls",
        "--worker-extension-cls",
        "--scheduler-cls",
        "--distributed-executor-backend",
        "--middleware",
        "--tool-parser-plugin",
        "--reasoning-parser-plugin",
        "--logits-processors",
        "--kv-transfer-config",
        "--ec-transfer-config",
        "--kv-events-config",
        "--load-format",
        "--model-loader-extra-config",
        "--download-dir",
        "--allowed-local-media-path",
        "--chat-template",
        "--ssl-keyfile",
        "--ssl-certfile",
        "--ssl-ca-certs",
        "--uds",
        "--otlp-traces-endpoint",
    }
)
#: Longest value of one variable a recorded scope may set.
MAX_VALUE_CHARS = 4096


def env_refusal(name: str, value: str = "") -> str | None:
    """Why an engine variable from someone else's scope is refused, or None when it is on the allow-list."""
    if len(value) > MAX_VALUE_CHARS or any(ord(c) < 32 for c in value):
        return "its value is over 4096 characters or holds control characters"
    if name in ALLOWED_EXACT:
        return None
    if not name.startswith(ALLOWED_PREFIXES):
        return "not on the allow-list (VLLM_*, HF_* and device settings)"
    if name in DENIED_VLLM or name.endswith(DENIED_SUFFIXES) or any(p in name for p in DENIED_PARTS):
        return "it loads code or names a path, a host or a credential"
    return None


def env_problems(envs: Mapping[str, Mapping[str, str]]) -> list[str]:
    """``where.NAME: why`` for each refused variable of ``{where: {name: value}}``."""
    out = []
    for where, env in envs.items():
        for name, value in sorted(env.items()):
            why = env_refusal(str(name), str(value))
            if why:
                out.append(f"{where}.{name[:80]}: {why}")
    return out


def arg_problems(args: Mapping[str, Iterable[str]]) -> list[str]:
    """``where: --flag`` for each code-loading argument in ``{where: [arg, ...]}`` (``--flag=value`` and
    underscores, which vLLM's parser accepts, included)."""
    out = []
    for where, values in args.items():
        for a in values:
            text = str(a)
            if not text.startswith("--"):
                continue
            flag = "--" + text[2:].split("=", 1)[0].replace("_", "-").lower()
            if flag in CODE_LOADING_ARGS:
                out.append(f"{where}: {flag}")
    return out
