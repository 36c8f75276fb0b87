"""Peak memory and time of verify, report, sign, merge and the dashboard on hostile result tables.

Each bundle is a committed H200 bundle (``examples/h200-run``) with one table made hostile the way issue 45 found
(tests/security/mutate_testlib.py builds them; test code, put on sys.path here):

* ``row-bomb``: the perf points table as a million copies of one row (a few KB of Parquet);
* ``text-bomb``: every perf point given one 48 MB text through one dictionary entry (about 1.1 GB of text from a
  file of a few MB);
* ``wide-text``: one plain 200 MB cell (the largest text a table may decompress to, read whole);
* ``list-verdict``: one list-valued verdict cell (it crashed every command before);
* ``max-rows``: every table repeated up to the most rows the plan allows it (about 420,000 rows in all: the most
  decoding work a bundle within the row bounds asks for).

Every command runs in a fresh process of its own (``python -m fasttrack ...``); the figures are its peak resident
memory (``ru_maxrss`` of the process that ran it) and its wall clock, next to the unedited bundle's. docs/security.md
quotes them.

    python benchmarks/hostile_tables.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "security"))  # the hostile tables are built by test code
sys.path.insert(0, str(ROOT / "tests"))

import mutate_testlib as M  # noqa: E402 - tests/security goes on sys.path first

from fasttrack.bundle.keys import generate_keypair, load_private_key  # noqa: E402 - the repository root first
from fasttrack.bundle.pack import pack_bundle  # noqa: E402 - the repository root first

WRAP = (
    "import resource, subprocess, sys, time; t = time.perf_counter(); "
    "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode; "
    "print(rc, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)
HOSTILE = {
    "row-bomb": M.row_bomb,
    "text-bomb": M.text_bomb,
    "wide-text": M.wide_text,
    "list-verdict": lambda r: M.edit_rows(r, "perf", "points", lambda rows: rows[0].update(verdict=["fail"])),
    "max-rows": M.fill_to_bounds,
}


def measure(cmd: list[str]) -> tuple[int, float, float]:
    """(exit code, seconds, peak MiB) of ``cmd`` run in a process of its own."""
    out = subprocess.run([sys.executable, "-c", WRAP, *cmd], capture_output=True, text=True, check=True).stdout
    rc, secs, kib = out.split()
    return int(rc), float(secs), int(kib) / 1024


def bundles(work: Path, key: object, pub: Path) -> dict[str, Path]:
    """The unedited bundle and each hostile one, as tarballs signed by the forger's key."""
    out = {}
    for name, edit in {"unedited": None, **HOSTILE}.items():
        root = M.unpack("h200-run", work / name)
        if edit is not None:
            edit(root)
        M.force_sign(root, key)  # type: ignore[arg-type]
        out[name] = pack_bundle(root, work / f"{name}.tar.gz")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here too")
    args = ap.parse_args()
    ft = [sys.executable, "-m", "fasttrack"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        priv, pub = generate_keypair(work / "k", name="forger")
        scope = M.trusted_scope("h200-run", work / "scopes")
        for name, tar in bundles(work, load_private_key(priv), pub).items():
            dash = work / f"dash-{name}"
            dash.mkdir()
            shutil.copy(tar, dash / tar.name)
            shutil.copy(ROOT / "examples" / "h200-run" / "bundle.tar.gz", dash / "good.tar.gz")
            signed = work / f"sign-{name}"
            shutil.unpack_archive(tar, signed)
            cmds = {
                "verify": [*ft, "verify", str(tar), "--key", str(pub), "--trusted-scope", str(scope)],
                "report": [*ft, "report", str(tar), "-o", str(work / f"{name}.html"), "--key", str(pub)],
                "sign": [*ft, "sign", str(signed), "--key", str(priv), "--replace"],
                "merge": [*ft, "merge", str(tar), "-o", str(work / f"merged-{name}"), "--key", str(pub)],
                "dashboard": [
                    *ft,
                    "dashboard",
                    "build",
                    "--bundles",
                    str(dash),
                    "-o",
                    str(work / f"site-{name}"),
                    "--key",
                    str(pub),
                    "--jobs",
                    "1",
                ],
            }
            for what, cmd in cmds.items():
                rc, secs, mib = measure(cmd)
                rows.append(
                    {"bundle": name, "command": what, "exit": rc, "seconds": round(secs, 2), "peak_mib": round(mib)}
                )
                print(f"{name:<14}{what:<11}exit {rc}  {secs:6.2f} s  {mib:6.0f} MiB peak", flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
