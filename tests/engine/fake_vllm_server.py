"""A stand-in for ``python -m vllm.entrypoints.launchers.api_server.entry`` in lifecycle unit tests.

It accepts the same command line (``-m MODULE --model M --host H --port P ...``),
spawns one child process (like vLLM's engine core) in its own process group and
serves /health, /v1/models, /version and /server_info (its ``--profiler-config``).
``FAKE_VLLM_MODE`` selects a behaviour:

- ``ok``: well-behaved; SIGINT stops the child and exits.
- ``stubborn``: server and child ignore SIGINT and SIGTERM (only SIGKILL works).
- ``orphan``: on SIGINT the server exits at once and leaves its child running
  (the child ignores SIGINT and SIGTERM).
- ``exit``: prints an error and exits with code 3 before serving.
- ``hang``: never answers /health.

When the child dies, the server logs it and exits with code 1 (as vLLM does when
its engine core dies).

A multi-node node: with ``--headless`` among the arguments (a follower started through
``node_main.py follower``) it serves nothing and only keeps its child. ``FAKE_VLLM_NODE_EXIT``
``RANK:SECONDS`` makes the node of that ``--node-rank`` exit with code 7 after that long
(``RANK:0``: before the leader is healthy).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _arg(name: str, default: str | None = None) -> str | None:
    argv = sys.argv[1:]
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
    return default


def _child(mode: str) -> None:
    if mode in ("stubborn", "orphan"):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ready", flush=True)
    while True:
        time.sleep(1)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2])
        return
    mode = os.environ.get("FAKE_VLLM_MODE", "ok")
    model = _arg("--model", "fake-model")
    host = _arg("--host", "127.0.0.1")
    port = int(_arg("--port", "8000") or 8000)
    print(f"fake server pid={os.getpid()} mode={mode} argv={sys.argv[1:]}", flush=True)
    print(f"FASTTRACK_DEMO_DEFECT={os.environ.get('FASTTRACK_DEMO_DEFECT', '')}", flush=True)
    if mode == "exit":
        print("ValueError: something is wrong with the model", flush=True)
        sys.exit(3)
    rank = _arg("--node-rank")
    node_exit = os.environ.get("FAKE_VLLM_NODE_EXIT", "")
    exit_at: float | None = None
    if rank is not None and node_exit.partition(":")[0] == rank:
        exit_at = time.monotonic() + float(node_exit.partition(":")[2] or 0)
    if exit_at is not None and exit_at <= time.monotonic():
        print(f"node {rank}: RuntimeError: the peer went away", flush=True)
        sys.exit(7)
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--child", mode], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    print(f"engine core pid={child.pid}", flush=True)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:
            print("http " + fmt % args, flush=True)

        def _send(self, code: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - the name http.server dispatches GET to
            if self.path == "/health":
                self._send(200, {})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
            elif self.path == "/version":
                self._send(200, {"version": "0.0-fake"})
            elif self.path.split("?")[0] == "/server_info":
                profiler = json.loads(_arg("--profiler-config", "{}") or "{}")
                self._send(200, {"vllm_config": {"profiler_config": profiler}, "vllm_env": {}})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}", "code": 404}})

    if mode == "hang":
        while True:
            time.sleep(1)

    if "--headless" in sys.argv:
        print(f"headless node {rank}: workers up", flush=True)
        signal.signal(signal.SIGINT, lambda *a: sys.exit(0))
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
        try:
            while exit_at is None or time.monotonic() < exit_at:
                time.sleep(0.1)
        finally:
            child.terminate()
        print(f"node {rank}: RuntimeError: the peer went away", flush=True)
        sys.exit(7)

    stop = threading.Event()
    if mode == "stubborn":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif mode == "orphan":
        signal.signal(signal.SIGINT, lambda *a: os._exit(0))
    else:
        signal.signal(signal.SIGINT, lambda *a: stop.set())
        signal.signal(signal.SIGTERM, lambda *a: stop.set())

    httpd = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    print("serving", flush=True)

    while not stop.is_set():
        if exit_at is not None and time.monotonic() >= exit_at:
            print(f"node {rank}: RuntimeError: the peer went away", flush=True)
            os._exit(7)
        if child.poll() is not None:
            print(f"engine core died with code {child.returncode}; shutting down", flush=True)
            sys.exit(1)
        time.sleep(0.1)
    print("shutting down", flush=True)
    child.terminate()
    child.wait()
    httpd.shutdown()


if __name__ == "__main__":
    main()
