"""Dashboard build time over many bundles: a cold build, a rebuild with nothing changed, and
one after a few bundles were added, changed and removed, against the same corpus.

The bundles are synthetic (tests/synthetic: invented figures, written, signed
and verified with the real bundle layer) and varied: five models, several hundred PRs
(some heads with two or three independent bundles), every verdict, isolation violations,
rehearsals, unsigned bundles, bundles signed by an untrusted key, tampered bundles and
tarballs.

Goals (README, Development): 2,000 bundles built in at most 60 s on two cores, and a rebuild
with nothing changed in at most 5 s. Every rebuild hashes every bundle's content (the cache is
keyed by it, never by sizes or times); verification and rendering run in worker processes.
Each step prints its wall clock, the CPU seconds it used (this process and the workers) and the
load average around it: the machine may be shared, and a wall clock under load says little;
CPU seconds / cores is what the step would take on idle cores. The corpus is left as it was
found (the third step undoes its changes), so ``--keep DIR`` measures the same bundles again.

    python benchmarks/dashboard_scale.py [--bundles 2000] [--jobs N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the synthetic bundles are test code

from synthetic import Spec, make_bundle  # noqa: E402 - tests/ goes on sys.path first

from fasttrack.bundle.keys import SigningKey, generate_keypair, load_private_key  # noqa: E402 - the repository root goes on sys.path first
from fasttrack.bundle.pack import pack_bundle  # noqa: E402 - the repository root goes on sys.path first
from fasttrack.report.site import build_site  # noqa: E402 - the repository root goes on sys.path first

MODELS = ("demo-llama", "kimi-k3", "glm-5.3", "deepseek-v4.1-flash", "muse-spark")
CHECKS = ("kernels", "equivalence", "features", "coverage", "evals", "perf")


def plan_specs(n: int, seed: int = 0) -> list[tuple[str, Spec, str, bool]]:
    """(name, spec, signer, tarball) for ``n`` varied bundles."""
    rng = random.Random(seed)
    out = []
    prs = max(1, n // 3)
    for i in range(n):
        pr = rng.randrange(1, prs + 1)
        model = MODELS[pr % len(MODELS)]
        head = f"{pr:08x}" + f"{rng.choice((0, 0, 0, 1)):032x}"  # most PRs: one head, some two
        r = rng.random()
        fail = tuple(rng.sample(CHECKS, rng.choice((1, 1, 2)))) if r < 0.2 else ()
        not_run = tuple(c for c in rng.sample(CHECKS, 1) if c not in fail) if 0.2 <= r < 0.3 else ()
        spec = Spec(
            model=model,
            seed=i,
            pr_number=60000 + pr,
            head_sha=head,
            fail=fail,
            not_run=not_run,
            isolation=rng.choices(("pass", "fail", "review"), (0.93, 0.04, 0.03))[0],
            rehearsal=rng.random() < 0.05,
            speedup=rng.uniform(0.98, 1.5),
            created=f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00+00:00",
        )
        signer = rng.choices(("trusted", "none", "other", "tampered"), (0.88, 0.05, 0.05, 0.02))[0]
        out.append((f"pr{60000 + pr}-{i:04d}", spec, signer, rng.random() < 0.1))
    return out


_keys: dict[str, SigningKey] = {}


def _init(key_dir: str) -> None:
    _keys["trusted"] = load_private_key(Path(key_dir) / "trusted" / "ci")
    _keys["other"] = load_private_key(Path(key_dir) / "other" / "stranger")


def _make(job: tuple[str, Spec, str, bool, str]) -> None:
    name, spec, signer, tarball, root = job
    sign = [_keys["trusted"]] if signer in ("trusted", "tampered") else ([_keys["other"]] if signer == "other" else [])
    out = Path(root) / name
    if tarball:
        src = Path(root).parent / "tar-src" / name
        make_bundle(src, spec, sign_keys=sign)
        pack_bundle(src, out.with_name(name + ".tar.gz"))
        shutil.rmtree(src)
        return
    make_bundle(out, spec, sign_keys=sign)
    if signer == "tampered":
        (out / "artifacts" / "perf" / "notes.txt").write_text("edited after signing\n")


def generate(root: Path, key_dir: Path, n: int, jobs: int, seed: int = 0) -> float:
    t0 = time.perf_counter()
    root.mkdir(parents=True, exist_ok=True)
    work = [(name, spec, signer, tar, str(root)) for name, spec, signer, tar in plan_specs(n, seed)]
    with ProcessPoolExecutor(max_workers=jobs, initializer=_init, initargs=(str(key_dir),)) as ex:
        list(ex.map(_make, work, chunksize=16))
    return time.perf_counter() - t0


class Step:
    """Wall clock, CPU seconds (this process and its finished children) and load around one step."""

    def __enter__(self) -> "Step":
        self.load0 = os.getloadavg()[0]
        self.t0, self.c0 = time.perf_counter(), os.times()
        return self

    def __exit__(self, *exc: object) -> None:
        c1 = os.times()
        self.wall = time.perf_counter() - self.t0
        self.cpu = (c1.user - self.c0.user) + (c1.system - self.c0.system)
        self.cpu += (c1.children_user - self.c0.children_user) + (c1.children_system - self.c0.children_system)
        self.load1 = os.getloadavg()[0]

    def line(self, cores: int) -> str:
        return (
            f"{self.wall:7.2f} s wall, {self.cpu:7.2f} CPU-s ({self.cpu / cores:6.2f} s on {cores} idle core(s)); "
            f"load average {self.load0:.1f} -> {self.load1:.1f}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundles", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it")
    args = ap.parse_args(argv)
    cores = max(1, min(args.jobs, os.cpu_count() or 1))
    tmp = None
    if args.keep is None:
        tmp = tempfile.TemporaryDirectory(prefix="fasttrack-dash-scale-")
        work = Path(tmp.name)
    else:
        work = args.keep
        work.mkdir(parents=True, exist_ok=True)
    try:
        keys = work / "keys"
        if not (keys / "trusted" / "ci").exists():
            generate_keypair(keys / "trusted", name="ci", comment="ci")
            generate_keypair(keys / "other", name="stranger", comment="stranger")
        bundles, site = work / "bundles", work / "site"
        if not bundles.exists():
            g = generate(bundles, keys, args.bundles, args.jobs)
            print(f"generated {args.bundles} bundles in {g:.1f} s ({sum(1 for _ in bundles.iterdir())} entries)")
        n = sum(1 for _ in bundles.iterdir())
        print(f"{n} bundles; {os.cpu_count()} core(s) here, {args.jobs} worker(s)")
        shutil.rmtree(site, ignore_errors=True)
        pub = [keys / "trusted" / "ci.pub"]

        with Step() as st:
            cold = build_site(bundles, site, keys=pub, jobs=args.jobs)
        print(
            f"cold build:              {st.line(cores)}  ({cold.read} bundles read, {len(cold.errors)} errors, "
            f"{st.cpu / max(cold.read, 1) * 1000:.1f} CPU-ms per bundle)"
        )
        cold_step = st
        with Step() as st:
            warm = build_site(bundles, site, keys=pub, jobs=args.jobs)
        print(f"rebuild, nothing changed: {st.line(cores)}  ({warm.read} read, {warm.reused} unchanged)")
        warm_step = st
        # a few bundles arrive, one is edited in place (size and time kept), one goes away; then undone
        victims = sorted(p for p in bundles.iterdir() if p.is_dir())[:2]
        edited = sorted(victims[0].rglob("*.log"))[0]
        original, times = edited.read_bytes(), (edited.stat().st_atime_ns, edited.stat().st_mtime_ns)
        flipped = bytearray(original)
        flipped[len(flipped) // 2] ^= 0x01
        edited.write_bytes(bytes(flipped))
        os.utime(edited, ns=times)
        aside = work / "aside"
        shutil.rmtree(aside, ignore_errors=True)
        victims[1].rename(aside)
        _init(str(keys))
        added = []
        for name, spec, signer, tar in plan_specs(10, seed=99):
            _make((f"zz-new-{name}", spec, signer, tar, str(bundles)))
            added.append(f"zz-new-{name}")
        try:
            with Step() as st:
                delta = build_site(bundles, site, keys=pub, jobs=args.jobs)
            print(
                f"rebuild after +10/~1/-1: {st.line(cores)}  ({delta.read} read, {delta.reused} unchanged, "
                f"{delta.removed} removed; {delta.bundles} bundles)"
            )
        finally:
            edited.write_bytes(original)
            os.utime(edited, ns=times)
            aside.rename(victims[1])
            for p in bundles.iterdir():
                if p.name.startswith("zz-new-"):
                    shutil.rmtree(p) if p.is_dir() else p.unlink()
        size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
        print(f"site: {site} ({size / 1e6:.1f} MB; index.html {(site / 'index.html').stat().st_size / 1e6:.2f} MB)")
        if n >= 2000:
            for what, step, goal in (("cold build", cold_step, 60.0), ("rebuild, nothing changed", warm_step, 5.0)):
                print(
                    f"goal: {what} of {n} bundles <= {goal:g} s: wall {step.wall:.1f} s "
                    f"({'met' if step.wall <= goal else 'NOT met'}); on {cores} idle core(s) {step.cpu / cores:.1f} s "
                    f"({'met' if step.cpu / cores <= goal else 'NOT met'})"
                )
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
