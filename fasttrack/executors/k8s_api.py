"""The few Kubernetes API calls a shard's driver pod makes: create its engines, own them, delete them.

In the cluster the driver uses its pod's service account (the token, CA and namespace Kubernetes mounts under
``/var/run/secrets/kubernetes.io/serviceaccount``) against ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``;
``FASTTRACK_K8S_API`` (and ``FASTTRACK_K8S_TOKEN_FILE``) name another endpoint. The rendered Role grants exactly
these calls on the kinds the driver creates (LeaderWorkerSets, Services, ComputeDomains) and on its ConfigMap.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from fasttrack.errors import FasttrackError

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
PLURALS: dict[tuple[str, str], str] = {
    ("v1", "Service"): "services",
    ("v1", "ConfigMap"): "configmaps",
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "leaderworkersets",
    ("resource.nvidia.com/v1beta1", "ComputeDomain"): "computedomains",
    ("batch/v1", "Job"): "jobs",
}


def object_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    """The API path of ``kind`` in ``namespace`` (its collection, or the object ``name``)."""
    plural = PLURALS.get((api_version, kind))
    if plural is None:
        raise FasttrackError(f"the driver does not create {kind} objects ({api_version}).")
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{root}/namespaces/{namespace}/{plural}" + (f"/{name}" if name else "")


@dataclass
class Api:
    base_url: str
    token: str | None
    verify: str | bool
    timeout: float = 30.0

    @classmethod
    def in_cluster(cls) -> "Api":
        url = os.environ.get("FASTTRACK_K8S_API")
        token_file = Path(os.environ.get("FASTTRACK_K8S_TOKEN_FILE") or SA_DIR / "token")
        token = token_file.read_text().strip() if token_file.is_file() else None
        if url:
            return cls(url.rstrip("/"), token, verify=str(SA_DIR / "ca.crt") if url.startswith("https") else False)
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host or token is None:
            raise FasttrackError(
                "not inside a Kubernetes pod (no KUBERNETES_SERVICE_HOST or service account token).",
                hint="The driver Job runs this; elsewhere set FASTTRACK_K8S_API (and FASTTRACK_K8S_TOKEN_FILE).",
            )
        return cls(f"https://{host}:{port}", token, verify=str(SA_DIR / "ca.crt"))

    def _call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        headers.update(kw.pop("headers", {}))
        try:
            return httpx.request(
                method, self.base_url + path, headers=headers, verify=self.verify, timeout=self.timeout, **kw
            )
        except httpx.HTTPError as exc:
            raise FasttrackError(
                f"the Kubernetes API at {self.base_url} did not answer {method} {path}: {exc}"
            ) from None

    def create(self, obj: dict[str, Any], *, replace: bool = True, wait_s: float = 120.0) -> None:
        """Create ``obj``; one of the same name left by an earlier run is deleted first (``replace``)."""
        meta = obj["metadata"]
        coll = object_path(obj["apiVersion"], obj["kind"], meta["namespace"])
        r = self._call("POST", coll, json=obj)
        if r.status_code == 409 and replace:
            self.delete(obj)
            deadline = time.monotonic() + wait_s
            while self.exists(obj) and time.monotonic() < deadline:
                time.sleep(2)
            r = self._call("POST", coll, json=obj)
        if r.status_code not in (200, 201):
            raise FasttrackError(f"creating {obj['kind']} {meta['name']} failed ({r.status_code}): {r.text[:500]}")

    def exists(self, obj: dict[str, Any]) -> bool:
        meta = obj["metadata"]
        r = self._call("GET", object_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]))
        return r.status_code == 200

    def delete(self, obj: dict[str, Any]) -> bool:
        """Delete ``obj`` and what it owns (background propagation); False when it was not there."""
        meta = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        r = self._call("DELETE", path, json={"propagationPolicy": "Background"})
        if r.status_code == 404:
            return False
        if r.status_code not in (200, 202):
            raise FasttrackError(f"deleting {obj['kind']} {meta['name']} failed ({r.status_code}): {r.text[:500]}")
        return True

    def own(self, api_version: str, kind: str, namespace: str, name: str, owner: dict[str, Any]) -> None:
        """Add ``owner`` to the object's owner references (a JSON merge patch of its metadata)."""
        path = object_path(api_version, kind, namespace, name)
        r = self._call(
            "PATCH",
            path,
            json={"metadata": {"ownerReferences": [owner]}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        if r.status_code != 200:
            raise FasttrackError(f"owning {kind} {name} failed ({r.status_code}): {r.text[:500]}")
