"""One TLS context per process for every HTTP client that talks to an engine.

httpx builds a new ``ssl.SSLContext`` (and reads the CA bundle, some 40 ms) for each client it
creates without one; fasttrack creates a client per window, metrics scrape and profiler call, most
of them to ``http://`` engines that never use it. The shared context is the one httpx would build by
default (``httpx.create_ssl_context()``: verifying, the environment's ``SSL_CERT_FILE`` honoured), so an
``https://`` engine URL is verified as before.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.lru_cache(maxsize=1)
def tls_context() -> ssl.SSLContext:
    """The process's verifying TLS context (built on first use; an ``SSLContext`` is safe to share)."""
    return httpx.create_ssl_context()
