"""CPU core pinning for engines that are up together (interleaved perf pairs).

When the baseline and the candidate engine run side by side on one host, each engine's
processes get a disjoint set of CPU cores: the cores this process may use
(``os.sched_getaffinity``, or the scope's ``engine.cpu_pinning.cores``) are split into
two contiguous halves, one per side, and the halves swap sides from one engine lifetime
to the next (lifetime 0: baseline on the first half; lifetime 1: on the second; ...), so
a core that is slower than the other (interrupt handling, a noisy neighbour) does not
land on one side every time.

The mechanism is the kernel's CPU affinity mask: :func:`pinned` sets the mask of the
calling thread while it starts the engine, and every process the engine starts inherits
it (the API server, the engine core, the workers, their OpenMP threads). vLLM's CPU
backend sizes its OpenMP pool from that mask (``VLLM_CPU_OMP_THREADS_BIND=auto`` reads
``os.sched_getaffinity``), so a pinned CPU engine binds its compute threads inside its
own half; :func:`pinning_env` sets ``auto`` for a pinned CPU engine whose environment
named explicit cores, which could lie outside the mask. On GPU hosts the same split
keeps each engine's CPU-side work (scheduler, API server, sampling, Python) off the
other engine's cores. Processes started on other hosts (Slurm ranks) are placed by their
own launcher, not by this mask.

With fewer than two usable cores there is nothing to split: the engines share the core,
and :func:`pair_cpus` says so (``None``).

**Swapping within a lifetime** (``alternate: blocks``): a core that another process keeps busy
for minutes slows whichever engine sits on it, for the whole lifetime. With ``blocks``, the
two engines also trade halves between the A B B A blocks of runs (:func:`repin` moves every
thread of each engine's processes), so each side spends the same share of its runs on each
half. Only for hosts where moving a process between cores costs nothing (one memory node,
such as the two-core demo hosts); on a GPU host each half is usually a socket with its own
memory and GPUs, and engines keep their half for their lifetime.

**The running engine on the measuring half** (``alternate: runs``): before every run, the engine
about to run moves to the *measuring* half and the other one to the other half
(:func:`place`), so both runs of a pair, back to back, run on the same cores and whatever
else keeps those cores busy slows both alike; the idle engine (and its polling after a
request) stays off them. The measuring half alternates between A B B A blocks. Same
condition as ``blocks``: one memory node.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

SIDES_ORDER = ("baseline", "candidate")


def parse_cpu_list(text: str) -> list[int]:
    """``"0-3,8,10-11"`` -> ``[0, 1, 2, 3, 8, 10, 11]`` (the Linux cpu-list format); ValueError on bad input."""
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"{text!r} is not a CPU list such as '0-3,8' (bad part {part!r})")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise ValueError(f"{text!r}: range {part!r} runs backwards")
        out.extend(range(a, b + 1))
    if not out:
        raise ValueError(f"{text!r} names no CPU")
    return sorted(set(out))


def format_cpu_list(cpus: Sequence[int]) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``"0-3,8"``."""
    s = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        parts.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return ",".join(parts)


def usable_cpus(cores: str | None = None) -> list[int]:
    """The cores to split: ``cores`` (a CPU list) limited to those this process may use, else all it may use."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if cores is None:
        return allowed
    wanted = parse_cpu_list(cores)
    return [c for c in wanted if c in set(allowed)]


def split_halves(cpus: Sequence[int]) -> tuple[list[int], list[int]] | None:
    """Two disjoint, contiguous halves of ``cpus`` (sorted; an odd core goes to the first), or None below two."""
    s = sorted(set(cpus))
    if len(s) < 2:
        return None
    mid = (len(s) + 1) // 2
    return s[:mid], s[mid:]


def pair_cpus(side: str, lifetime: int, *, cores: str | None = None, alternate: bool = True) -> list[int] | None:
    """The cores of ``side``'s engine in the ``lifetime``-th pair (None: nothing to split).

    Lifetime 0: the baseline gets the first half, the candidate the second; with ``alternate`` the
    halves swap on every later lifetime."""
    halves = split_halves(usable_cpus(cores))
    if halves is None:
        return None
    k = SIDES_ORDER.index(side) if side in SIDES_ORDER else 0
    if alternate and lifetime % 2 == 1:
        k = 1 - k
    return list(halves[k])


def other_half(cpus: Sequence[int], *, cores: str | None = None) -> list[int] | None:
    """The half of the split that ``cpus`` is not (None when ``cpus`` is not one of the two halves)."""
    halves = split_halves(usable_cpus(cores))
    if halves is None:
        return None
    if sorted(cpus) == halves[0]:
        return list(halves[1])
    if sorted(cpus) == halves[1]:
        return list(halves[0])
    return None


def pinning_env(cpus: Sequence[int] | None, env: dict[str, str | None], *, cpu_device: bool) -> dict[str, str | None]:
    """Environment overrides for a pinned engine: on a CPU device, ``VLLM_CPU_OMP_THREADS_BIND=auto`` (vLLM then
    binds its compute threads inside the inherited mask) unless the engine's environment already chose ``auto``
    or ``nobind``; nothing otherwise."""
    if not cpus or not cpu_device:
        return {}
    cur = env.get("VLLM_CPU_OMP_THREADS_BIND") or os.environ.get("VLLM_CPU_OMP_THREADS_BIND")
    if cur in ("auto", "nobind"):
        return {}
    return {"VLLM_CPU_OMP_THREADS_BIND": "auto"}


@contextlib.contextmanager
def pinned(cpus: Sequence[int] | None) -> Iterator[None]:
    """Start processes inside this block on ``cpus`` only (they inherit the calling thread's affinity mask).

    The mask of the calling thread is restored on exit. ``None`` or an empty list: no change."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(cpus))
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def repin(pids: Sequence[int], cpus: Sequence[int]) -> int:
    """Move every thread of the processes ``pids`` onto ``cpus`` (an engine's threads, while it runs); returns the
    number of threads moved. Threads that ended meanwhile are skipped."""
    moved = 0
    target = set(cpus)
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(tid, target)
                moved += 1
            except (ProcessLookupError, FileNotFoundError):
                continue
    return moved


def swap_cpus(a_pids: Sequence[int], b_pids: Sequence[int]) -> tuple[list[int], list[int]] | None:
    """Trade the cores of two pinned engines (every thread of each one's processes moves to the other's cores);
    returns their new cores, or None when they are not on disjoint core sets (not pinned: nothing to trade)."""
    if not a_pids or not b_pids:
        return None
    a, b = process_cpus(a_pids[0]), process_cpus(b_pids[0])
    if not a or not b or set(a) & set(b):
        return None
    repin(a_pids, b)
    repin(b_pids, a)
    return b, a


def measuring_half(block: int, *, cores: str | None = None) -> tuple[list[int], list[int]] | None:
    """(measuring half, other half) for the ``block``-th A B B A block (``alternate: runs``): the first half on
    even blocks, the second on odd ones; None with fewer than two usable cores."""
    halves = split_halves(usable_cpus(cores))
    if halves is None:
        return None
    return (list(halves[0]), list(halves[1])) if block % 2 == 0 else (list(halves[1]), list(halves[0]))


def place(run_pids: Sequence[int], idle_pids: Sequence[int], run_cpus: Sequence[int], idle_cpus: Sequence[int]) -> int:
    """The engine about to run (``run_pids``) onto ``run_cpus``, the other one onto ``idle_cpus`` (moved first, so
    for that moment both sit where nothing runs yet); returns the threads moved, 0 when both already sat there."""
    if not run_pids or not idle_pids or set(run_cpus) & set(idle_cpus):
        return 0
    if process_cpus(run_pids[0]) == sorted(run_cpus) and process_cpus(idle_pids[0]) == sorted(idle_cpus):
        return 0
    return repin(idle_pids, idle_cpus) + repin(run_pids, run_cpus)


def process_cpus(pid: int) -> list[int] | None:
    """The affinity mask of a live process (None when it cannot be read)."""
    try:
        return sorted(os.sched_getaffinity(pid))
    except (OSError, AttributeError):
        return None
