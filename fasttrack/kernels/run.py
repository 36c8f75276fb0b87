"""Run one kernel suite and write its rows as JSON.

    python -m fasttrack.kernels.run --suite suites/kimi-k3/kernels --out rows.json [--candidate MODULE]

The suite's pytest modules run in a subprocess (``python -m pytest`` with the
``fasttrack.kernels.plugin`` plugin), so a crashing kernel cannot take the runner down. Then,
where a CUDA device and compute-sanitizer exist, the suite's ``sanitize`` selection runs under
memcheck, racecheck and synccheck. Needs only the standard library, torch, triton and pytest.

Exit status: 0 pass, 1 fail, 4 not run, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from fasttrack import attrs
from fasttrack.kernels import ROWS_SCHEMA, env, sanitizer
from fasttrack.kernels.defects import KNOWN as KNOWN_DEFECTS
from fasttrack.kernels.summary import FAIL, NOT_RUN, PASS, summarize
from fasttrack.kernels.tolerance import dtype_name, validate_table

_REPO = Path(__file__).resolve().parents[2]
EXIT = {PASS: 0, FAIL: 1, NOT_RUN: 4}


class UsageError(ValueError):
    """Bad runner arguments (exit status 2)."""


def _json_arg(raw: str | None, what: str) -> dict[str, Any]:
    """An option's JSON object, given inline or as ``@file``."""
    if not raw:
        return {}
    text = Path(raw[1:]).read_text(encoding="utf-8") if raw.startswith("@") else raw
    try:
        return env.json_object(text, f"{what} (inline, or @file)")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def suite_env(
    *,
    suite_name: str,
    rows_path: Path,
    candidate: str | None,
    defects: Sequence[str],
    tier: str,
    tolerances: dict[str, Any],
    dims: dict[str, Any],
    dtypes: Sequence[str],
    seed: int,
) -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(_REPO)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    e["PYTHONUNBUFFERED"] = "1"
    e.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS while allocations are poisoned
    e[env.ROWS] = str(rows_path)
    e[env.SUITE] = suite_name
    e[env.TIER] = tier
    e[env.SEED] = str(seed)
    e[env.DEFECT] = ",".join(defects)
    for var, val in (
        (env.CANDIDATE, candidate),
        (env.TOLERANCES, json.dumps(tolerances) if tolerances else ""),
        (env.DIMS, json.dumps(dims) if dims else ""),
        (env.DTYPES, ",".join(dtypes)),
    ):
        if val:
            e[var] = val
        else:
            e.pop(var, None)
    return e


def pytest_args(suite_dir: Path, ini: Path, marker: str, select: str | None) -> list[str]:
    args = [
        sys.executable,
        "-m",
        "pytest",
        str(suite_dir),
        "-p",
        "fasttrack.kernels.plugin",
        "-p",
        "no:cacheprovider",
        "-c",
        str(ini),
        "--rootdir",
        str(suite_dir),
        "-m",
        marker,
        "-q",
        "--tb=short",
        "-rs",
    ]
    if select:
        args += ["-k", select]
    return args


def _stream(
    cmd: list[str], *, env_vars: dict[str, str], cwd: Path, timeout_s: float, quiet: bool
) -> tuple[int | None, str]:
    """Run ``cmd``, echo its output (unless quiet), return (exit code or None on timeout, output)."""
    lines: list[str] = []
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env_vars, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    timed_out = threading.Event()

    def _kill() -> None:
        timed_out.set()
        proc.kill()

    watchdog = threading.Timer(timeout_s, _kill)
    watchdog.start()
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line)
            if not quiet:
                sys.stdout.write(line)
        rc = proc.wait()
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if timed_out.is_set():
        lines.append(f"\n[fasttrack] killed after {timeout_s:.0f} s\n")
        return None, "".join(lines)
    return rc, "".join(lines)


def run_suite(
    suite_dir: Path,
    out: Path,
    *,
    candidate: str | None = None,
    defects: Sequence[str] = (),
    tier: str = "standard",
    tolerances: dict[str, Any] | None = None,
    dims: dict[str, Any] | None = None,
    dtypes: Sequence[str] = (),
    sanitize: str = "auto",
    select: str | None = None,
    seed: int = 0,
    suite_name: str | None = None,
    timeout_s: float = 3600.0,
    sanitizer_timeout_s: float = 300.0,
    quiet: bool = False,
) -> dict[str, Any]:
    """Run the suite, then the sanitizers; write and return the rows document."""
    suite_dir = suite_dir.resolve()
    tolerances, dtypes = _checked_args(suite_dir, defects=defects, tier=tier, tolerances=tolerances, dtypes=dtypes)
    name = suite_name or suite_dir.parent.name + "/" + suite_dir.name
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="ft-kernels-") as tmp:
        tmpd = Path(tmp)
        ini = tmpd / "pytest.ini"
        ini.write_text("[pytest]\n", encoding="utf-8")
        rows_path = tmpd / "rows.json"
        e = suite_env(
            suite_name=name,
            rows_path=rows_path,
            candidate=candidate,
            defects=defects,
            tier=tier,
            tolerances=tolerances,
            dims=dims or {},
            dtypes=dtypes,
            seed=seed,
        )
        cmd = pytest_args(suite_dir, ini, "not sanitize", select)
        rc, output = _stream(cmd, env_vars=e, cwd=suite_dir, timeout_s=timeout_s, quiet=quiet)
        doc = _rows_doc(rows_path, name, rc)
        doc["runner"] = {
            "command": " ".join(cmd),
            "suite_dir": str(suite_dir),
            "pytest_exit_code": rc,
            "log_tail": output[-4000:],
        }
        if rc is None:
            doc["error"] = f"the suite did not finish within {timeout_s:.0f} s (rows up to that point are kept)"
        # the sanitizer selection is the suite's ``sanitize`` marker alone (``-k`` does not apply)
        doc["sanitizer"] = _sanitizers(suite_dir, ini, e, sanitize, sanitizer_timeout_s, tmpd, doc)
    doc["wall_s_total"] = round(time.time() - t0, 1)
    doc["summary"] = summarize(doc)
    out.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return doc


def _checked_args(
    suite_dir: Path,
    *,
    defects: Sequence[str],
    tier: str,
    tolerances: dict[str, Any] | None,
    dtypes: Sequence[str],
) -> tuple[dict[str, Any], list[str]]:
    """The suite folder, defects and tier checked (:class:`UsageError` otherwise); the tolerances checked and the
    dtypes by their names."""
    if not suite_dir.is_dir():
        raise UsageError(f"suite directory {str(suite_dir)!r} does not exist")
    if not any(suite_dir.glob("test_*.py")):
        raise UsageError(f"suite directory {str(suite_dir)!r} holds no test_*.py modules")
    unknown = sorted(set(defects) - set(KNOWN_DEFECTS))
    if unknown:
        raise UsageError(f"unknown planted defect(s) {unknown}; known: {', '.join(sorted(KNOWN_DEFECTS))}")
    if tier not in env.TIERS:
        raise UsageError(f"tier {tier!r} is not one of {', '.join(env.TIERS)}")
    tolerances = tolerances or {}
    try:
        validate_table(tolerances, where="tolerances")
        return tolerances, [dtype_name(d) for d in dtypes]
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _rows_doc(rows_path: Path, name: str, rc: int | None) -> dict[str, Any]:
    """The rows the suite's run wrote (a document that says it wrote none, and why, when there are none)."""
    if rows_path.is_file():
        doc: dict[str, Any] = json.loads(rows_path.read_text(encoding="utf-8"))
    else:
        why = "timed out" if rc is None else f"exit code {rc}"
        doc = {
            "schema": ROWS_SCHEMA,
            "suite": name,
            "error": f"pytest wrote no rows ({why}); see log_tail",
            "cases": [],
            "determinism": [],
            "perturbation": [],
            "speed_of_light": [],
            "tests": [],
        }
    doc["suite"] = name
    return doc


def _sanitizers(
    suite_dir: Path, ini: Path, e: dict[str, str], sanitize: str, timeout_s: float, tmpd: Path, doc: dict[str, Any]
) -> list[dict[str, Any]]:
    if sanitize == "off":
        return sanitizer.not_run_rows("switched off (--sanitize off)")
    tools = sanitizer.TOOLS if sanitize == "auto" else tuple(t.strip() for t in sanitize.split(",") if t.strip())
    bad = sorted(set(tools) - set(sanitizer.TOOLS))
    if bad:
        raise UsageError(f"unknown sanitizer tool(s) {bad}; known: {', '.join(sanitizer.TOOLS)}")
    if doc.get("candidate_error"):
        return sanitizer.not_run_rows("the candidate could not be imported", tools)
    reason = sanitizer.environment_reason()
    if reason:
        return sanitizer.not_run_rows(reason, tools)
    exe = sanitizer.find()
    assert exe is not None
    rows = []
    for tool in tools:
        rows_path = tmpd / f"rows-{tool}.json"
        te = dict(e)
        te[env.ROWS] = str(rows_path)
        te[env.SANITIZER] = tool
        args = pytest_args(suite_dir, ini, "sanitize", None)
        row = sanitizer.run_tool(tool, exe=exe, pytest_args=args, env=te, cwd=suite_dir, timeout_s=timeout_s)
        if rows_path.is_file():
            sub = json.loads(rows_path.read_text(encoding="utf-8"))
            row["cases_checked"] = len(sub.get("cases", []))
            row["cases_failed"] = sum(1 for r in sub.get("cases", []) if r.get("verdict") != PASS)
            row["tests"] = [{k: t.get(k) for k in ("test", "outcome", "reason")} for t in sub.get("tests", [])]
        rows.append(row)
        print(
            f"[fasttrack] compute-sanitizer {tool}: {row['status']}, errors={row.get('errors')}, {row.get('wall_s')} s",
            flush=True,
        )
    return rows


def format_summary(doc: dict[str, Any]) -> str:
    s = doc["summary"]
    lines = [f"suite {s['suite']}: {s['verdict'].upper()} - {s['reason']}"]
    lines.append(
        f"{'kernel/output':40} {'dtype':6} {'cases':>5} {'fail':>4} {'max_abs':>10} {'max_rel':>10} {'max_ulp':>8}"
    )
    for k in s["per_kernel"]:
        lines.append(
            f"{k['kernel'] + '/' + k['output']:40} {k['dtype']:6} {k['cases']:5d} {k['failed']:4d} "
            f"{k['max_abs_err']:10.3g} {k['max_rel_err']:10.3g} {k['max_ulp']:8d}"
        )
    for r in doc.get("determinism", []):
        lines.append(
            f"determinism {r['kernel']}/{r['output']} [{r['shape']}]: "
            f"{'bitwise' if r['bitwise_equal'] else str(r['max_ulp']) + ' ULP'} over {r['runs']} runs "
            f"-> {r['verdict']}"
        )
    for r in doc.get("perturbation", []):
        lines.append(
            f"perturbation {r['kernel']} [{r['shape']}]: {r['failed_trials']}/{r['trials']} trials differ, "
            f"{r['stale_nan_trials']} stale-NaN -> {r['verdict']}"
        )
    for r in doc.get("sanitizer", []):
        lines.append(f"sanitizer {r['tool']}: {r['status']} ({r.get('reason')})")
    for r in doc.get("speed_of_light", []):
        lines.append(
            f"speed {r['kernel']} [{r['shape']}]: {r['time_us']:.2f} us, {r['achieved_gbs']:.0f} GB/s = "
            f"{r['pct_peak_bandwidth']:.1f}% of {r['peak_bandwidth_gbs']:.0f} GB/s, "
            f"{r['achieved_tflops']:.2f} TFLOP/s = {r['pct_peak_flops']:.2f}% of {r['peak_bf16_tflops']:.0f}"
        )
    for f in s["failures"][:20]:
        lines.append(f"FAIL {f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m fasttrack.kernels.run", description="Run a kernel suite and write its rows as JSON."
    )
    p.add_argument("--suite", required=True, type=Path, help="suite directory (holds test_*.py and conftest.py)")
    p.add_argument("--out", required=True, type=Path, help="rows JSON to write")
    p.add_argument("--candidate", help="candidate module: dotted name or .py path (default: the suite's)")
    p.add_argument(
        "--defect",
        action="append",
        default=[],
        help=f"plant a defect in the shipped candidates ({', '.join(sorted(KNOWN_DEFECTS))})",
    )
    p.add_argument("--tier", default="standard", choices=env.TIERS)
    p.add_argument("--tolerances", help="JSON {kernel: {dtype: {atol, rtol, ulp}}} or @file")
    p.add_argument("--dims", help="JSON {name: int} overriding the suite's model dimensions, or @file")
    p.add_argument("--dtypes", default="", help="comma-separated dtypes (fp32, fp16, bf16, fp8); default: the suite's")
    p.add_argument(
        "--sanitize",
        default="auto",
        help="auto (all tools where available), off, or a comma-separated subset of memcheck,racecheck,synccheck",
    )
    p.add_argument("-k", dest="select", help="pytest -k expression selecting tests")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", help="suite name recorded in the rows (default: <model>/<dir>)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds for the main pytest run")
    p.add_argument("--sanitizer-timeout", type=float, default=300.0, help="seconds per sanitizer tool")
    p.add_argument("--quiet", action="store_true", help="do not echo pytest's output")
    a = p.parse_args(argv)
    try:
        doc = run_suite(
            a.suite,
            a.out,
            **attrs(a, "candidate", "tier", "sanitize", "select", "seed", "quiet"),
            defects=[d for x in a.defect for d in x.split(",") if d],
            tolerances=_json_arg(a.tolerances, "--tolerances"),
            dims=_json_arg(a.dims, "--dims"),
            dtypes=[d for d in a.dtypes.split(",") if d],
            suite_name=a.name,
            timeout_s=a.timeout,
            sanitizer_timeout_s=a.sanitizer_timeout,
        )
    except (UsageError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_summary(doc))
    print(f"rows written to {a.out}")
    return EXIT[doc["summary"]["verdict"]]


if __name__ == "__main__":
    sys.exit(main())
