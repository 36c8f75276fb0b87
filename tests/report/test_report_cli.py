"""``fasttrack report`` and ``fasttrack dashboard build`` from the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    e = {k: v for k, v in os.environ.items() if k != "FASTTRACK_TRUST_DIR"}
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "fasttrack", *args], capture_output=True, text=True, timeout=300, env=e
    )


def test_report_command_writes_report_and_comment(bundle_factory, keys, tmp_path: Path) -> None:
    b = bundle_factory("good", model="demo-llama", seed=1)
    out, comment = tmp_path / "r.html", tmp_path / "c.md"
    p = run("report", str(b), "-o", str(out), "--comment", str(comment), "--key", str(keys.trusted_pub))
    assert p.returncode == 0, p.stderr
    assert "verdict pass" in p.stdout
    assert out.read_text().startswith("<!DOCTYPE html>") and comment.read_text().startswith("<!-- fasttrack-report -->")


def test_report_trust_dir_from_environment(bundle_factory, keys, tmp_path: Path) -> None:
    b = bundle_factory("good", model="demo-llama", seed=1)
    out = tmp_path / "r.html"
    p = run("report", str(b), "-o", str(out), env={"FASTTRACK_TRUST_DIR": str(keys.trust_dir)})
    assert p.returncode == 0, p.stderr
    html = out.read_text()
    assert "no trusted key given" not in html and '<div class="big">Verified</div>' in html
    assert '<li class="ok"><span class="mark-ok" aria-label="ok">&#10003;</span> <b>Verified:' in html


def test_unverified_report_still_written_and_require_verified(bundle_factory, tmp_path: Path) -> None:
    b = bundle_factory("good", model="demo-llama", seed=1)
    out = tmp_path / "r.html"
    p = run("report", str(b), "-o", str(out))
    assert p.returncode == 0 and "NOT verified" in p.stdout and out.is_file()
    p = run("report", str(b), "-o", str(out), "--require-verified")
    assert p.returncode == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["report", "/nonexistent/bundle", "-o", "x.html"], "does not exist"),
        (["report", "BUNDLE", "-o", "x.html", "--key", "/nonexistent.pub"], "does not exist"),
        (
            ["report", "BUNDLE", "-o", "x.html", "--comment", "c.md", "--report-url", "javascript:alert(1)"],
            "not a plain http(s) URL",
        ),
        (["dashboard", "build", "--bundles", "/nonexistent", "-o", "site"], "is not a directory"),
    ],
)
def test_bad_input_is_one_clear_error(args: list[str], message: str, bundle_factory, tmp_path: Path) -> None:
    b = bundle_factory("good", model="demo-llama", seed=1)
    args = [str(b) if a == "BUNDLE" else (str(tmp_path / a) if a in ("x.html", "c.md", "site") else a) for a in args]
    p = run(*args)
    assert p.returncode == 2, p.stdout + p.stderr
    assert message in p.stderr and "Traceback" not in p.stderr


def test_dashboard_build_command(bundle_factory, keys, tmp_path: Path) -> None:
    d = tmp_path / "bundles"
    d.mkdir()
    bundle_factory("one", parent=d, model="demo-llama", seed=1)
    p = run("dashboard", "build", "--bundles", str(d), "-o", str(tmp_path / "site"), "--key", str(keys.trusted_pub))
    assert p.returncode == 0, p.stderr
    assert "1 bundles" in p.stdout and "1 read" in p.stdout
    p = run("dashboard", "build", "--bundles", str(d), "-o", str(tmp_path / "site"), "--key", str(keys.trusted_pub))
    assert "0 read, 1 unchanged" in p.stdout
