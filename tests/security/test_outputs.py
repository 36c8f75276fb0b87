"""Issue 45, findings 4-7: what fasttrack writes and serves, and what a hostile table can do to each command.

* 4: one hostile cell (a list-valued verdict) is a finding in verify, and report, merge, sign and the dashboard
  each answer it (a page marked not verified, an input error, a rejected bundle), none crashes;
* 5: ``report -o`` and every writer refuse a target that is not a regular file (a FIFO, a device, ``/dev/stdout``,
  a symbolic link), and the temporary file is created exclusively beside the target, never through a link;
* 6: ``dashboard serve`` sends a bundle's member only while its bytes hash as they did when the bundle was verified;
* 7: a speedup of 1e308 (consistent with its own verdict, so it verifies) renders as text, charts leave it out, and
  the dashboard lists the bundle.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mutate_testlib import claim_pass, edit_rows, unpack
from security_testlib import force_sign
from synthetic import Spec, make_bundle

from fasttrack import ROOT
from fasttrack.bundle import outfile
from fasttrack.bundle.errors import BundleError, MergeError
from fasttrack.bundle.keys import generate_keypair, load_private_key
from fasttrack.bundle.pack import pack_bundle
from fasttrack.report import fmt
from fasttrack.report.render import write_text


def ft(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fasttrack", *map(str, args)], capture_output=True, text=True, cwd=ROOT, timeout=600
    )


@pytest.fixture(scope="module")
def forger(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    root = tmp_path_factory.mktemp("outputs-keys")
    priv, pub = generate_keypair(root, name="forger")
    return load_private_key(priv), pub


def test_finding_4_one_hostile_cell_stops_no_command(tmp_path: Path, forger: Any) -> None:
    from fasttrack.bundle.attest import sign_bundle
    from fasttrack.bundle.merge import merge_bundles
    from fasttrack.bundle.verify import verify_bundle
    from fasttrack.report.report import render_report
    from fasttrack.report.site import build_site

    key, pub = forger
    root = unpack("h200-run", tmp_path / "b")
    edit_rows(root, "perf", "points", lambda rows: rows[0].update(verdict=["fail"]))
    claim_pass(root)
    force_sign(root, key)
    res = verify_bundle(root, keys=[pub])
    assert not res.verified and "perf/points row 0: field 'verdict'" in res.item("tables").detail
    data = render_report(root, tmp_path / "r.html", keys=[pub], comment_path=tmp_path / "c.md")
    assert not data.verification.verified and "NOT VERIFIED" in (tmp_path / "c.md").read_text()
    points = next(t for c in data.checks if c.name == "perf" for t in c.tables if t.name == "points")
    assert points.error and "field 'verdict'" in points.error  # the table is shown as not readable, naming why
    with pytest.raises(MergeError, match="does not verify"):
        merge_bundles([root], tmp_path / "merged", keys=[pub])
    with pytest.raises(BundleError, match="refusing to sign"):
        sign_bundle(root, key, replace=True)
    dash = tmp_path / "dash"
    dash.mkdir()
    pack_bundle(root, dash / "hostile.tar.gz")
    shutil.copy(ROOT / "examples" / "h200-run" / "bundle.tar.gz", dash / "good.tar.gz")
    stats = build_site(dash, tmp_path / "site", keys=[pub, ROOT / "examples" / "h200-run" / "h200.pub"], jobs=1)
    assert stats.bundles == 2 and not stats.errors  # the hostile one is listed, not verified; the build goes on


# --------------------------------------------------------------------------- 5: safe outputs


@pytest.mark.parametrize("kind", ["fifo", "symlink", "dev-null", "dev-stdout", "directory"])
def test_finding_5_report_refuses_a_target_that_is_not_a_regular_file(kind: str, tmp_path: Path) -> None:
    target = tmp_path / "out.html"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "symlink":
        target.symlink_to(victim)
    elif kind == "directory":
        target.mkdir()
    else:
        target = Path("/dev/null" if kind == "dev-null" else "/dev/stdout")
    r = ft("report", ROOT / "examples" / "h200-run" / "bundle.tar.gz", "-o", target)
    assert r.returncode == 2 and "refusing to write" in r.stderr, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    assert victim.read_text() == "keep me"
    if kind == "fifo":
        assert target.is_fifo()
    if kind == "symlink":
        assert target.is_symlink()


def test_finding_5_the_temporary_file_is_exclusive_and_never_follows_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link planted where the temporary file will be made is neither followed nor replaced (the old writer used
    ``.NAME.PID.tmp``, opened without O_EXCL, so a planted link redirected the write)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = tmp_path / "report.html"
    monkeypatch.setattr(secrets, "token_hex", lambda n=8: "0" * (2 * n))
    planted = tmp_path / f".report.html.{'0' * 16}.tmp"
    planted.symlink_to(victim)
    (tmp_path / f".report.html.{os.getpid()}.tmp").symlink_to(victim)  # the old, predictable name
    with pytest.raises(FileExistsError):
        write_text(target, "<html>")
    assert victim.read_text() == "keep me" and planted.is_symlink() and not target.exists()
    monkeypatch.undo()
    write_text(target, "<html>")  # a random name again: written, and only the target changed
    assert target.read_text() == "<html>" and victim.read_text() == "keep me"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()]


def test_finding_5_every_writer_refuses_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    with pytest.raises(outfile.OutputError, match="it is a FIFO"):
        outfile.write_bytes(fifo, b"x")
    with pytest.raises(outfile.OutputError, match="it is a FIFO"):
        pack_bundle(unpack("h200-run", tmp_path / "b"), fifo)
    example = ROOT / "examples" / "h200-run"
    r = ft(
        "pr", "body", example / "bundle.tar.gz", "-o", fifo, "--key", example / "h200.pub",
        "--bundle-url", "https://example.org/b.tar.gz", "--run-url", "https://example.org/run/1",
    )  # fmt: skip
    assert r.returncode == 2 and "refusing to write" in r.stderr and "Traceback" not in r.stderr
    assert fifo.is_fifo()


# --------------------------------------------------------------------------- 6: dashboard serve


def test_finding_6_serve_sends_a_member_only_while_it_hashes_as_verified(tmp_path: Path, forger: Any) -> None:
    from fasttrack.report.server import Dashboard

    key, pub = forger
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    make_bundle(bundles / "b", Spec(model="demo-llama", seed=3), sign_keys=[key])
    dash = Dashboard(bundles, tmp_path / "site", keys=[str(pub)], jobs=1, log=lambda m: None)
    dash.build()
    from fasttrack.report.index_db import Index

    idx = Index(tmp_path / "site" / "index.sqlite")
    (rec,) = idx.records()
    idx.close()
    member = next(m for m in rec.members if m.endswith("notes.txt"))
    _, data, name = dash.member_file(rec.id[:16], member)
    assert name == member and data == (bundles / "b" / member).read_bytes()
    (bundles / "b" / member).write_text("<script>edited after the bundle was verified</script>")
    assert dash.member_file(rec.id[:16], member) == (None, None, "")


# --------------------------------------------------------------------------- 7: huge and non-finite numbers


def test_finding_7_huge_and_non_finite_figures_render_as_text(tmp_path: Path, forger: Any) -> None:
    from fasttrack.report.report import render_report
    from fasttrack.report.site import build_site

    key, pub = forger
    root = make_bundle(tmp_path / "b", Spec(model="demo-llama", seed=4), sign_keys=[])
    edit_rows(
        root,
        "perf",
        "points",
        lambda rows: [r.update(speedup=1e308, ci_low=1e308, ci_high=float("inf"), candidate=1e-308) for r in rows],
    )
    edit_rows(root, "evals", "eval_breakdown", lambda rows: [r.update(candidate_score=float("nan")) for r in rows])
    force_sign(root, key)
    data = render_report(root, tmp_path / "r.html", keys=[pub])
    html = (tmp_path / "r.html").read_text()
    assert data.verification.verified  # consistent figures: a pass with a lower bound of 1e308 is a pass
    assert "1.000e+308×" in html  # as text
    assert (fmt.speedup(float("inf")), fmt.speedup(float("nan")), fmt.speedup(1e308)) == ("inf×", "nan×", "1.000e+308×")
    assert "e+308" not in "".join(c for c in html.split("<svg")[1:] if "speedup" in c)  # not drawn off a scale
    dash = tmp_path / "dash"
    dash.mkdir()
    shutil.copytree(root, dash / "huge")
    stats = build_site(dash, tmp_path / "site", keys=[pub], jobs=1)
    assert stats.bundles == 1 and stats.read == 1 and not stats.errors
