"""A multi-node shard's driver (`fasttrack k8s drive`) against a stand-in Kubernetes API and stand-in engines:
it waits for its turn, creates its engines owned by its Job (and owns its ConfigMap), runs validate once both
answer /health, deletes its engines whatever happened, and records the exit status (and why, when validate never
ran). No cluster runs here: the API is a small HTTP server that records the calls."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from fasttrack import ROOT
from fasttrack.executors import k8s
from fasttrack.executors.k8s_api import Api
from fasttrack.executors.k8s_drive import EXIT_NO_ENGINES, DriveOptions, drive
from fasttrack.executors.shards import layout
from fasttrack.executors.site import load_site
from fasttrack.pipeline.options import ValidateOptions
from fasttrack.scope import load_scope

UID = "0f0f0f0f-1111-2222-3333-444455556666"


class FakeApi(BaseHTTPRequestHandler):
    calls: list[tuple[str, str, Any]]
    objects: dict[str, Any]

    def _reply(self, code: int, body: Any = None) -> None:
        data = json.dumps(body or {}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n)) if n else None

    def do_POST(self) -> None:  # noqa: N802 - http.server's names
        body = self._body()
        self.calls.append(("POST", self.path, body))
        key = f"{self.path}/{body['metadata']['name']}"
        if key in self.objects:
            return self._reply(409)
        self.objects[key] = body
        self._reply(201, body)

    def do_DELETE(self) -> None:  # noqa: N802
        self.calls.append(("DELETE", self.path, self._body()))
        self._reply(200 if self.objects.pop(self.path, None) is not None else 404)

    def do_GET(self) -> None:  # noqa: N802
        self.calls.append(("GET", self.path, None))
        self._reply(200 if self.path in self.objects else 404)

    def do_PATCH(self) -> None:  # noqa: N802
        self.calls.append(("PATCH", self.path, self._body()))
        self._reply(200)

    def log_message(self, *args: object) -> None:
        return


class Health(BaseHTTPRequestHandler):
    up = True

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200 if self.up and self.path == "/health" else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


def _serve(handler: type) -> tuple[ThreadingHTTPServer, str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The rendered engines of K3's shard 1, a stand-in API and two stand-in engines."""
    r = k8s.render(
        layout(load_scope("kimi-k3"), tier="full"), load_site(None), k8s.K8sOptions(ValidateOptions("kimi-k3"))
    )
    engines = tmp_path / "engines.yaml"
    engines.write_text(yaml.safe_dump_all(r.engines[1]))
    api_handler = type("Api", (FakeApi,), {"calls": [], "objects": {}})
    health = type("H", (Health,), {"up": True})
    servers = [_serve(api_handler), _serve(health), _serve(health)]
    try:
        yield {
            "engines": engines,
            "objects": r.engines[1],
            "api": Api(servers[0][1], token="t", verify=False),
            "calls": api_handler.calls,
            "live": api_handler.objects,
            "health": health,
            "urls": {"baseline": servers[1][1], "candidate": servers[2][1]},
        }
    finally:
        for srv, _ in servers:
            srv.shutdown()


def _opts(c: dict[str, Any], tmp_path: Path, validate: list[str], **kw: Any) -> DriveOptions:
    return DriveOptions(
        engines=c["engines"],
        out=tmp_path / "bundles" / "shards" / "shard-1-of-36",
        urls=c["urls"],
        validate=validate,
        owner_job="ft-kimi-k3-full-s1-driver",
        owner_uid=UID,
        configmap="ft-kimi-k3-full-s1-engines",
        namespace="default",
        poll_s=0.2,
        **kw,
    )


def test_the_driver_creates_owned_engines_runs_validate_and_deletes_them(cluster, tmp_path: Path) -> None:
    marker = tmp_path / "validate-ran"
    opts = _opts(cluster, tmp_path, [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('x')"])
    assert drive(opts, api=cluster["api"], log=lambda m: None) == 0
    assert marker.exists()
    calls = cluster["calls"]
    posts = [body for method, _, body in calls if method == "POST"]
    assert [(b["kind"], b["metadata"]["name"]) for b in posts] == [
        (d["kind"], d["metadata"]["name"]) for d in cluster["objects"]
    ]
    for b in posts:  # each owned by the driver Job, with its uid
        (ref,) = b["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == ("Job", "ft-kimi-k3-full-s1-driver", UID)
    assert [p for m, p, _ in calls if m == "POST"][
        0
    ] == "/apis/resource.nvidia.com/v1beta1/namespaces/default/computedomains"
    (patch,) = [(p, b) for m, p, b in calls if m == "PATCH"]
    assert patch[0] == "/api/v1/namespaces/default/configmaps/ft-kimi-k3-full-s1-engines"
    assert patch[1]["metadata"]["ownerReferences"][0]["uid"] == UID
    deleted = [p for m, p, _ in calls if m == "DELETE"]
    assert len(deleted) == len(posts) and not cluster["live"], "every engine object deleted, last created first"
    assert deleted[0].endswith("/services/ft-kimi-k3-full-s1-cand-api")
    assert (opts.out / "exit-status").read_text().strip() == "0" and not (opts.out / "exit-note").exists()


def test_engines_that_never_answer_are_deleted_and_named(cluster, tmp_path: Path) -> None:
    cluster["health"].up = False
    opts = _opts(cluster, tmp_path, [sys.executable, "-c", "raise SystemExit(9)"], health_timeout_s=1.0)
    assert drive(opts, api=cluster["api"], log=lambda m: None) == EXIT_NO_ENGINES
    assert not cluster["live"]
    assert (opts.out / "exit-status").read_text().strip() == str(EXIT_NO_ENGINES)
    assert "did not answer /health within 1 s" in (opts.out / "exit-note").read_text()
    # the merge names the shard with that reason
    job = {"namespace": "default", "shard_jobs": {"1/36": {"job": "ft-kimi-k3-full-s1-driver"}}}
    note, info = k8s.describe_absent(job, tmp_path / "bundles")({"shard": "1/36", "dir": "shards/shard-1-of-36"})
    assert "exited with status 4" in note and "did not answer /health" in note and info["exit_status"] == "4"


def test_a_driver_waits_for_its_turn(cluster, tmp_path: Path) -> None:
    ahead = tmp_path / "bundles" / "shards" / "shard-5-of-36" / "exit-status"
    opts = _opts(cluster, tmp_path, [sys.executable, "-c", "pass"], after=ahead, after_max_s=60)
    threading.Timer(1.5, lambda: (ahead.parent.mkdir(parents=True), ahead.write_text("0\n"))).start()
    t0 = time.monotonic()
    assert drive(opts, api=cluster["api"], log=lambda m: None) == 0
    waited = time.monotonic() - t0
    assert waited >= 1.4, "no engine was created before the shard ahead ended"


def test_pod_deletion_stops_validate_and_still_cleans_up(cluster, tmp_path: Path) -> None:
    """SIGTERM to the driver (pod deletion) reaches validate; the engines are deleted and the status recorded."""
    ready = tmp_path / "ready"
    child = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n"
        f"open({str(ready)!r}, 'w').write('x')\n"
        "time.sleep(60)\n"
    )
    api = cluster["api"]
    script = tmp_path / "driver.py"
    script.write_text(
        "import json, sys\n"
        "from pathlib import Path\n"
        "from fasttrack.executors.k8s_api import Api\n"
        "from fasttrack.executors.k8s_drive import DriveOptions, drive\n"
        f"o = DriveOptions(engines=Path({str(cluster['engines'])!r}), out=Path({str(tmp_path / 'out')!r}),\n"
        f"    urls={cluster['urls']!r}, validate=[sys.executable, '-c', {child!r}], owner_job='j', owner_uid='u',\n"
        "    poll_s=0.2)\n"
        f"sys.exit(drive(o, api=Api({api.base_url!r}, token='t', verify=False), log=lambda m: None))\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.time() + 60
    while not ready.exists() and time.time() < deadline:
        time.sleep(0.1)
    assert ready.exists()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    assert (tmp_path / "out" / "exit-status").read_text().strip() == "143"
    assert not cluster["live"], "the engines were deleted"
