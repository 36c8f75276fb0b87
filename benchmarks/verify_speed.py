"""How fast is ``fasttrack verify`` compared with plain sha256 over the same bytes?

Builds a signed bundle of realistic size (default about 200 MB: a large engine log, eval
samples, per-request timings, a trace excerpt, Parquet tables), then times, alternately
and several times each:

- ``sha256``: ``hashlib.file_digest(f, "sha256")`` over every bundle file (nothing else);
- ``verify``: ``verify_bundle(dir)`` (signature, every hash, file list, schema,
  verdicts, tables).

The ratio is throughput(verify) / throughput(sha256) = t_sha256 / t_verify, from the
median of the rounds (target: at least 0.8). With ``--tarball`` it also times
``verify_bundle(bundle.tar.gz)`` against sha256 over the same (uncompressed) member bytes
and against gzip decompression plus sha256 (the floor for any tarball verifier).

    python benchmarks/verify_speed.py [--mb 200] [--rounds 5] [--tarball]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fasttrack import bundle as B
from fasttrack.bundle.manifest import EngineRecord, Hardware, Provenance
from fasttrack.checks.base import CheckResult, Gate, Verdict


def _log_lines(n_bytes: int) -> bytes:
    """Engine-log-like text (compressible, like a real log)."""
    parts, size, i = [], 0, 0
    while size < n_bytes:
        line = (
            f"INFO 01-02 03:04:{i % 60:02d} [engine.py:{100 + i % 900}] step={i} batch={1 + i % 64} "
            f"running=1 waiting=0 kv_usage={i % 100 / 100:.2f} tok/s={1000 + (i * 7919) % 2000}\n"
        ).encode()
        parts.append(line)
        size += len(line)
        i += 1
    return b"".join(parts)[:n_bytes]


def build_run(root: Path, total_mb: int) -> Path:
    """A run folder whose artifacts and logs add up to about ``total_mb`` MB."""
    mb = 1024 * 1024
    run = root / "run"
    (run / "logs").mkdir(parents=True)
    (run / "artifacts" / "evals").mkdir(parents=True)
    (run / "artifacts" / "perf").mkdir(parents=True)
    (run / "artifacts" / "coverage").mkdir(parents=True)
    big = int(total_mb * 0.55)
    (run / "logs" / "g0.baseline.0.log").write_bytes(_log_lines(big * mb))
    (run / "logs" / "g0.candidate.0.log").write_bytes(_log_lines(int(total_mb * 0.10) * mb))
    (run / "artifacts" / "evals" / "samples.jsonl").write_bytes(os.urandom(int(total_mb * 0.15) * mb))
    (run / "artifacts" / "perf" / "requests.jsonl").write_bytes(os.urandom(int(total_mb * 0.10) * mb))
    (run / "artifacts" / "coverage" / "trace-excerpt.json").write_bytes(os.urandom(int(total_mb * 0.10) * mb))
    return run


def build_bundle(root: Path, total_mb: int, key: B.SigningKey) -> Path:
    run = build_run(root, total_mb)
    rows = [
        {"point": f"b{b}", "lifetime": lt, "tpot_ms": 3.5 + b / 100 + lt / 10, "side": s}
        for b in (1, 2, 4, 8, 16, 32, 64)
        for lt in range(5)
        for s in ("baseline", "candidate")
    ]
    results = [
        CheckResult(
            check=c,
            verdict=Verdict.PASS,
            reason="ok",
            gate=Gate(statistic="s", threshold=1.0, rule="r"),
            tables={"rows": rows * 200},
            artifacts=[],
        )
        for c in ("kernels", "equivalence", "features", "coverage", "evals", "perf")
    ]
    prov = Provenance(
        fasttrack_version="0.1.0",
        python_version=sys.version.split()[0],
        platform=sys.platform,
        hardware=Hardware(kind="cpu", cpu_model="bench"),
        packages_sha256="0" * 64,
        engines=[EngineRecord(side="baseline", group="g0", mode="owned", args=["--dtype", "bfloat16"])],
    )
    out = root / "bundle"
    B.write_bundle(
        out,
        results=results,
        scope=B.scope_info("name: bench\n", model="bench", tier="smoke"),
        plan=B.plan_info({"points": []}),
        provenance=prov,
        pr=B.PRLink(head_sha="a" * 40),
        created="2025-01-01T00:00:00+00:00",
        artifacts_from=run,
        sign_keys=[key],
    )
    return out


def plain_sha256(files: list[Path]) -> None:
    for p in files:
        with open(p, "rb") as f:
            hashlib.file_digest(f, "sha256")


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=200, help="approximate bundle size in MB")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tarball", action="store_true", help="also time verification of the .tar.gz")
    ap.add_argument("--target", type=float, default=0.8)
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="ft-verify-bench-") as tmp:
        root = Path(tmp)
        priv, pub = B.generate_keypair(root / "keys", name="bench")
        key = B.load_private_key(priv)
        t0 = time.perf_counter()
        bundle = build_bundle(root, args.mb, key)
        files = sorted(p for p in bundle.rglob("*") if p.is_file())
        total = sum(p.stat().st_size for p in files)
        print(f"bundle: {len(files)} files, {total / 1e6:.1f} MB (built in {time.perf_counter() - t0:.1f} s)")
        plain_sha256(files)  # warm the page cache for both contestants
        res = B.verify_bundle(bundle, keys=[pub])
        assert res.verified, res.failures
        assert res.bytes_hashed == total

        t_sha, t_ver = [], []
        for _ in range(args.rounds):
            t_sha.append(timed(lambda: plain_sha256(files)))
            t_ver.append(timed(lambda: B.verify_bundle(bundle, keys=[pub])))
        ms, mv = statistics.median(t_sha), statistics.median(t_ver)
        ratio = ms / mv
        print(
            f"sha256 only:        median {ms:.3f} s  ({total / ms / 1e6:.0f} MB/s)  runs {[round(x, 3) for x in t_sha]}"
        )
        print(
            f"verify (directory): median {mv:.3f} s  ({total / mv / 1e6:.0f} MB/s)  runs {[round(x, 3) for x in t_ver]}"
        )
        print(f"ratio verify/sha256 throughput: {ratio:.3f} (target >= {args.target})")
        ok = ratio >= args.target

        if args.tarball:
            t0 = time.perf_counter()
            tgz = B.pack_bundle(bundle, root / "bundle.tar.gz")
            print(f"\ntarball: {tgz.stat().st_size / 1e6:.1f} MB (packed in {time.perf_counter() - t0:.1f} s)")
            data = tgz.read_bytes()
            t_gz, t_tv = [], []
            for _ in range(max(1, args.rounds // 2)):
                t_gz.append(timed(lambda: hashlib.sha256(gzip.decompress(data)).hexdigest()))
                t_tv.append(timed(lambda: B.verify_bundle(tgz, keys=[pub])))
            mg, mt = statistics.median(t_gz), statistics.median(t_tv)
            print(f"gunzip + sha256:    median {mg:.3f} s")
            print(f"verify (tar.gz):    median {mt:.3f} s  ({total / mt / 1e6:.0f} MB/s of members)")
            print(f"ratio verify(tar.gz) / sha256 over the same member bytes: {ms / mt:.3f}")
            print(f"ratio verify(tar.gz) / (gunzip + sha256):                 {mg / mt:.3f}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
