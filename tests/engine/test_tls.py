"""Engine clients share one verifying TLS context instead of building one per client."""

from __future__ import annotations

import ssl

import httpx

from fasttrack.engine.client import EngineClient
from fasttrack.engine.tls import tls_context


def test_one_verifying_context_is_shared() -> None:
    ctx = tls_context()
    assert ctx is tls_context()
    assert ctx.verify_mode is ssl.CERT_REQUIRED and ctx.check_hostname


def test_the_engine_client_uses_it(monkeypatch) -> None:
    seen: list[object] = []
    real = httpx.AsyncClient.__init__

    def spy(self, *a, **kw):  # type: ignore[no-untyped-def]
        seen.append(kw.get("verify"))
        real(self, *a, **kw)

    monkeypatch.setattr(httpx.AsyncClient, "__init__", spy)
    EngineClient("http://127.0.0.1:1", model="m")
    assert seen == [tls_context()]
