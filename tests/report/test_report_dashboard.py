"""The dashboard: incremental SQLite index, review queue order, agreement, local server."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from dashboard_testlib import served_dashboard

from fasttrack.bundle.pack import pack_bundle
from fasttrack.report.agreement import compare, group
from fasttrack.report.records import BundleRecord, PerfPoint
from fasttrack.report.risk import assess, order
from fasttrack.report.site import build_site, discover

HEAD = "c0ffee" + "1" * 34


@pytest.fixture(scope="module")
def bundles_dir(tmp_path_factory: pytest.TempPathFactory, bundle_factory) -> Path:
    d = tmp_path_factory.mktemp("dash-bundles")
    bundle_factory("ok-a", parent=d, model="demo-llama", seed=1, head_sha=HEAD, created="2026-01-10T00:00:00+00:00")
    bundle_factory("ok-b", parent=d, model="demo-llama", seed=2, head_sha=HEAD, created="2026-01-11T00:00:00+00:00")
    bundle_factory(
        "fail",
        parent=d / "nested",
        model="demo-llama",
        seed=3,
        head_sha="d" * 40,
        pr_number=7,
        fail=("perf",),
        created="2026-01-12T00:00:00+00:00",
    )
    bundle_factory(
        "iso",
        parent=d,
        model="kimi-k3",
        seed=4,
        head_sha="e" * 40,
        pr_number=8,
        isolation="fail",
        created="2026-01-13T00:00:00+00:00",
    )
    bundle_factory(
        "unsigned",
        parent=d,
        signer=None,
        model="kimi-k3",
        seed=5,
        head_sha="f" * 40,
        pr_number=9,
        created="2026-01-01T00:00:00+00:00",
    )
    src = bundle_factory(
        "tarsrc",
        parent=d.parent / "tar-src",
        model="kimi-k3",
        seed=6,
        head_sha="9" * 40,
        pr_number=10,
        rehearsal=True,
        created="2026-01-14T00:00:00+00:00",
    )
    pack_bundle(src, d / "rehearsal.tar.gz")
    (d / "not-a-bundle").mkdir()
    (d / "not-a-bundle" / "README.txt").write_text("ignored")
    return d


def _build(bundles: Path, site: Path, keys, **kw) -> object:
    return build_site(bundles, site, keys=[keys.trusted_pub], jobs=kw.pop("jobs", 2), **kw)


def test_discover_finds_dirs_and_tarballs(bundles_dir: Path) -> None:
    names = [rel for rel, _ in discover(bundles_dir)]
    assert names == ["iso", "nested/fail", "ok-a", "ok-b", "rehearsal.tar.gz", "unsigned"]


def test_build_incremental_and_queue(bundles_dir: Path, keys, tmp_path: Path) -> None:
    site = tmp_path / "site"
    s1 = _build(bundles_dir, site, keys)
    assert (s1.bundles, s1.read, s1.reused, s1.errors) == (6, 6, 0, [])  # type: ignore[attr-defined]
    assert (site / "index.sqlite").is_file() and (site / "index.json").is_file()
    doc = json.loads((site / "index.json").read_text())
    assert doc["counts"]["bundles"] == 6 and doc["counts"]["unverified"] == 1
    # review queue: unverified first, then the isolation violation (it fails the verdict too), then failed gates
    order_ids = [b["path"] for b in doc["bundles"]]
    assert order_ids[0] == "unsigned"
    assert order_ids.index("iso") < order_ids.index("nested/fail") < order_ids.index("rehearsal.tar.gz")
    iso = next(b for b in doc["bundles"] if b["path"] == "iso")
    assert iso["verdict"] == "fail" and "isolation violated" in iso["risk"]["reasons"]
    assert doc["bundles"][0]["risk"]["reasons"][0].startswith("unverified")
    # two independent bundles of one head: compared, agreeing
    (grp,) = doc["groups"]
    assert grp["head_sha"] == HEAD and grp["status"] == "agree" and len(grp["bundles"]) == 2
    assert (site / "compare" / f"{grp['id']}.html").is_file()
    for b in doc["bundles"]:
        assert (site / b["report"]).is_file()
    # nothing changed: nothing is read again
    s2 = _build(bundles_dir, site, keys)
    assert (s2.read, s2.reused) == (0, 6)  # type: ignore[attr-defined]


def test_changed_added_removed_and_trust_change(bundles_dir: Path, bundle_factory, keys, tmp_path: Path) -> None:
    work = tmp_path / "b"
    shutil.copytree(bundles_dir, work)
    site = tmp_path / "site"
    _build(work, site, keys)
    (work / "ok-a" / "artifacts" / "perf" / "notes.txt").write_text("tampered")  # changed content
    shutil.rmtree(work / "iso")  # removed
    bundle_factory("new", parent=work, model="demo-llama", seed=11, head_sha="a" * 40)  # added
    s = _build(work, site, keys)
    assert (s.read, s.removed, s.bundles) == (2, 2, 6)  # type: ignore[attr-defined]
    doc = json.loads((site / "index.json").read_text())
    tampered = [b for b in doc["bundles"] if b["path"] == "ok-a"][0]
    assert not tampered["verified"] and tampered["hashes_ok"] is False
    assert {b["path"] for b in doc["bundles"][:2]} == {"ok-a", "unsigned"}  # unverified bundles lead the queue
    assert "NOT VERIFIED" in (site / tampered["report"]).read_text()
    # a different trust configuration re-verifies everything
    s2 = build_site(work, site, keys=[keys.other_pub], jobs=2)
    assert s2.read == 6
    doc2 = json.loads((site / "index.json").read_text())
    assert doc2["counts"]["verified"] == 0


def test_touch_without_change_reuses_by_content_hash(bundles_dir: Path, keys, tmp_path: Path) -> None:
    work = tmp_path / "b"
    shutil.copytree(bundles_dir, work)
    site = tmp_path / "site"
    _build(work, site, keys)
    f = work / "ok-b" / "manifest.json"
    f.write_bytes(f.read_bytes())  # new mtime, same bytes
    s = _build(work, site, keys)
    assert (s.read, s.reused) == (0, 6)  # type: ignore[attr-defined]


def _rec(i: str, **kw) -> BundleRecord:
    base = dict(
        id=i * 64,
        path=i,
        is_tar=False,
        verified=True,
        verification="",
        signature_ok=True,
        hashes_ok=True,
        readable=True,
        verdict="pass",
        model="m",
        head_sha="a" * 40,
        report=f"reports/{i}.html",
        checks={"perf": "pass", "evals": "pass"},
        created="2026-01-01T00:00:00+00:00",
    )
    base.update(kw)
    return BundleRecord(**base)  # type: ignore[arg-type]


def test_agreement_rules() -> None:
    p = lambda s, lo, hi: PerfPoint(point="b1", metric="tpot", speedup=s, ci_low=lo, ci_high=hi)  # noqa: E731
    a = _rec("a", perf=[p(1.10, 1.05, 1.15)])
    assert compare(a, _rec("b", perf=[p(1.12, 1.06, 1.18)])).status == "agree"
    far = compare(a, _rec("c", perf=[p(1.30, 1.25, 1.35)]))
    assert far.status == "disagree" and "b1 tpot" in far.differences[0]
    one_sided = compare(a, _rec("d", perf=[p(1.14, 1.13, 1.15)]))  # 1.10 outside d's interval
    assert one_sided.status == "disagree"
    verdicts = compare(a, _rec("e", checks={"perf": "fail", "evals": "pass"}))
    assert verdicts.status == "disagree" and verdicts.differences == ["check perf: pass vs fail"]
    skipped = compare(_rec("f", checks={"perf": "not_run"}), _rec("g", checks={"perf": "pass"}))
    assert skipped.status == "not_comparable"
    groups = group([a, _rec("h", perf=[p(1.11, 1.04, 1.16)]), _rec("i", head_sha="b" * 40)])
    assert sorted(g.status for g in groups) == ["agree", "single"]


def test_risk_order() -> None:
    recs = [
        _rec("p"),
        _rec("u", verified=False, signature_ok=False),
        _rec("f", verdict="fail", checks={"perf": "fail"}),
        _rec("i", isolation="fail"),
        _rec("n", verdict="incomplete", checks={"perf": "not_run"}),
        _rec("r", rehearsal=True),
    ]
    ranked = [r.path for r, _ in order([(r, assess(r)) for r in recs])]
    assert ranked == ["u", "f", "i", "n", "r", "p"]
    assert assess(_rec("p")).score == 0
    assert assess(_rec("d"), disagrees=True).reasons == ["disagrees with another bundle for the same PR head"]


@pytest.fixture()
def server(bundles_dir: Path, keys, tmp_path: Path) -> Iterator[str]:
    with served_dashboard(bundles_dir, tmp_path / "served", keys=[str(keys.trusted_pub)], jobs=2) as base:
        yield base


def test_server_pages_files_and_refusals(server: str) -> None:
    with httpx.Client(base_url=server, timeout=30) as c:
        r = c.get("/")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert (
            r.headers["x-content-type-options"] == "nosniff"
            and "frame-ancestors 'none'" in r.headers["content-security-policy"]
        )
        doc = c.get("/index.json").json()
        verified = [b for b in doc["bundles"] if b["verified"] and not b["is_tar"]][0]
        report = c.get("/" + verified["report"])
        assert report.status_code == 200 and "Verified" in report.text
        short = verified["id"][:16]
        f = c.get(f"/bundles/{short}/artifacts/perf/notes.txt")
        assert f.status_code == 200 and f.headers["content-type"].startswith("text/plain")
        assert f.headers["content-security-policy"].startswith("sandbox")
        assert "synthetic notes for perf" in f.text
        pq = c.get(f"/bundles/{short}/results/perf/points.parquet")
        assert pq.status_code == 200 and pq.headers["content-type"] == "application/octet-stream"
        assert pq.content[:4] == b"PAR1"
        tar = [b for b in doc["bundles"] if b["is_tar"] and b["verified"]][0]
        assert c.get(f"/bundles/{tar['id'][:16]}/manifest.json").status_code == 200
        unsigned = [b for b in doc["bundles"] if not b["verified"]][0]
        assert c.get(f"/bundles/{unsigned['id'][:16]}/manifest.json").status_code == 404  # not linked, not served
        for bad in (
            f"/bundles/{short}/../../index.sqlite",
            "/index.sqlite",
            f"/bundles/{short}/nope.txt",
            "/bundles/zzzz/manifest.json",
            "/reports/../../etc/passwd",
            "/%2e%2e/%2e%2e/etc/passwd",
        ):
            assert c.get(bad).status_code == 404, bad
        assert c.post("/").status_code == 405
