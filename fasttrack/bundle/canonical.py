"""Canonical JSON and streaming sha256: the two primitives every bundle byte goes through."""

from __future__ import annotations

import enum
import hashlib
import json
import math
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel

#: Read size for hashing. Large reads keep the per-call overhead far below the hash cost.
HASH_BUFFER = 4 * 1024 * 1024
#: A sha256 digest as this module writes it: 64 lower-case hex digits.
SHA256_PATTERN = r"^[0-9a-f]{64}$"


def to_jsonable(value: Any) -> Any:
    """Turn models, enums, paths, tuples, sets and non-finite floats into plain JSON values.

    Non-finite floats become the strings ``"nan"``, ``"inf"`` and ``"-inf"`` (JSON has no
    literal for them); sets are sorted so the output does not depend on hash order.
    """
    if isinstance(value, BaseModel):
        return to_jsonable(value.model_dump(mode="json"))
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((to_jsonable(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, Path):
        return value.as_posix()
    if isinstance(value, bytes):
        return value.hex()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "item"):  # numpy scalars
        return to_jsonable(value.item())
    if hasattr(value, "tolist"):  # numpy arrays
        return to_jsonable(value.tolist())
    raise TypeError(f"value of type {type(value).__name__} is not JSON-serialisable: {value!r}")


def canonical_json(value: Any, *, pretty: bool = True) -> bytes:
    """UTF-8 JSON with sorted keys and fixed separators (and a final newline when pretty).

    ``pretty=False`` gives the compact form used for signed payloads and hashes.
    """
    data = to_jsonable(value)
    if pretty:
        text = json.dumps(data, sort_keys=True, indent=2, separators=(",", ": "), ensure_ascii=False, allow_nan=False)
        return (text + "\n").encode("utf-8")
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of a byte string."""
    return hashlib.sha256(data).hexdigest()


def sha256_json(value: Any) -> str:
    """Hex sha256 of the compact canonical JSON of ``value``."""
    return sha256_bytes(canonical_json(value, pretty=False))


def sha256_stream(stream: IO[bytes], *, buffer: bytearray | None = None) -> tuple[str, int]:
    """Hex sha256 and byte count of a binary stream, read in large blocks into one buffer."""
    h = hashlib.sha256()
    buf = buffer if buffer is not None else bytearray(HASH_BUFFER)
    view = memoryview(buf)
    total = 0
    readinto = getattr(stream, "readinto", None)
    if readinto is not None:
        while True:
            n = readinto(view)
            if not n:
                break
            h.update(view[:n])
            total += n
    else:  # pragma: no cover - every stream we hash has readinto
        while True:
            chunk = stream.read(len(buf))
            if not chunk:
                break
            h.update(chunk)
            total += len(chunk)
    return h.hexdigest(), total


def sha256_file(path: Path, *, buffer: bytearray | None = None) -> tuple[str, int]:
    """Hex sha256 and size of a file, streamed (unbuffered reads straight into the buffer)."""
    with open(path, "rb", buffering=0) as f:
        return sha256_stream(f, buffer=buffer)
