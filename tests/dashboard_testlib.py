"""The dashboard served for a test: built over a folder of bundles and answering on a free local port."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fasttrack.report.server import Dashboard, make_server


@contextmanager
def served_dashboard(bundles: Path, out: Path, *, keys: list[str], jobs: int = 1) -> Iterator[str]:
    """The dashboard over ``bundles``, built into ``out`` and served while the block runs; its base URL
    (``http://127.0.0.1:PORT``). The server is shut down on leaving the block."""
    dash = Dashboard(bundles, out, keys=keys, jobs=jobs, log=lambda m: None)
    dash.build()
    httpd = make_server(dash, port=0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
