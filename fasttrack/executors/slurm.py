"""sbatch scripts for a plan: one job array per shard shape, and a merge job after them.

**Arrays, not a heterogeneous job.** Shards whose engines span different node counts
(e.g. TP8 on 2 trays, TP16 on 4) go into separate job arrays, one per (nodes, GPUs per
node); Slurm does not run heterogeneous jobs as arrays, a heterogeneous job would hold
every component's nodes for the whole job, and separate arrays let each shard start as
soon as nodes of its size are free, fail alone and be resubmitted alone
(``sbatch --array=7 array-4n4g.sbatch``). The array index is the shard number (an
array ``--array=1,4,7`` runs shards 1, 4 and 7 of n), so ``SLURM_ARRAY_TASK_ID`` is the
``i`` of ``--shard i/n`` in every array.

Each task runs ``fasttrack validate --shard i/n --out shards/shard-i-of-n`` in its
allocation; a shard whose engines span several nodes starts them with the multi-node
launcher's ``slurm`` mode (one ``srun`` task per node, chosen automatically inside an
allocation of several nodes). The merge job depends on every array with ``afterany``
(it runs whatever became of the shards) and runs ``fasttrack slurm merge`` on the job
folder (:mod:`fasttrack.executors.collect`).

Time limits come from the plan's estimate of each shard (the longest shard of an
array), times the site's ``time_factor`` plus ``time_margin_min``. An array runs at most
``max_parallel`` shards at once (``--array=...%N``). The site's ``sbatch`` lines go to the
shard arrays only; the merge job has its own section (``slurm.merge``).

**The PR under test.** With ``--repo/--base/--head`` (or the record ``fasttrack image``
wrote, whose image holds the PR's checkout) every shard runs ``validate --repo --base
--head``: its bundle is evidence for that change, and the isolation row compares the head
with the vLLM build every engine served. A container image named by digest is exported as
``FASTTRACK_IMAGE_DIGEST``, which the bundle's provenance records.

**One NVLink domain.** An array whose engines span nodes over the multi-node NVLink fabric
asks Slurm for nodes of one domain (:func:`fasttrack.executors.placement.slurm_lines`).
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasttrack.engine.cmdline import safety_exports
from fasttrack.executors.collect import JOB_FILE, MERGED_BUNDLE, MERGED_DIR, save_job
from fasttrack.executors.placement import slurm_lines
from fasttrack.executors.shards import ArraySpec, ShardLayout, ShardRunOptions, job_name
from fasttrack.executors.site import SiteProfile, image_env

LOGS_DIR = "logs"
SHARDS_DIR = "shards"


@dataclass
class SlurmOptions(ShardRunOptions):
    """What ``fasttrack slurm`` renders, beyond the plan and the site (the keys every shard signs its bundle with
    are ``validate.sign_keys``, as the nodes see them)."""

    job_dir: Path
    """The job folder (absolute; on a file system every node shares)."""
    container_image: str | None = None
    """The image every job runs in (default: the site's ``slurm.container_image``)."""


@dataclass
class RenderedScript:
    name: str
    """File name in the job folder."""
    job_name: str
    text: str
    array: ArraySpec | None = None


def slurm_time(minutes: float) -> str:
    """Minutes as Slurm's ``D-HH:MM:SS``."""
    m = max(1, math.ceil(minutes))
    d, rem = divmod(m, 24 * 60)
    h, mm = divmod(rem, 60)
    return f"{d}-{h:02d}:{mm:02d}:00"


def array_minutes(array: ArraySpec, site: SiteProfile) -> float:
    return array.max_wall_s / 60 * site.slurm.time_factor + site.slurm.time_margin_min


def _q(s: str | Path) -> str:
    return shlex.quote(str(s))


def _site_lines(site: SiteProfile, container_image: str | None, *, merge: bool) -> list[str]:
    """The site's ``#SBATCH`` lines: the shards' (partition, account, QoS, image, ``sbatch``), or the merge job's
    own (``merge``: its partition, account and QoS default to the shards', its lines are ``merge.sbatch`` only)."""
    s = site.slurm
    out = []
    m = s.merge
    where = (
        (("partition", m.partition or s.partition), ("account", m.account or s.account), ("qos", m.qos or s.qos))
        if merge
        else (("partition", s.partition), ("account", s.account), ("qos", s.qos))
    )
    for opt, val in where:
        if val:
            out.append(f"#SBATCH --{opt}={val}")
    image = container_image or s.container_image
    if image:
        out.append(f"#SBATCH --container-image={image}")
        if s.container_mounts:
            out.append(f"#SBATCH --container-mounts={','.join(s.container_mounts)}")
    out += [f"#SBATCH {line}" for line in (m.sbatch if merge else s.sbatch)]
    return out


def _prelude(site: SiteProfile, opts: SlurmOptions, *, image: str | None) -> list[str]:
    lines = ["set -uo pipefail", f"JOB_DIR={_q(opts.job_dir)}", 'cd "$JOB_DIR"']
    env = {**site.slurm_env, **image_env(image or opts.container_image or site.slurm.container_image)}
    lines += [f"export {k}={_q(v)}" for k, v in sorted(env.items())]
    lines += safety_exports()  # the host's GPU safety settings (the kernels run here), else the safe values
    srun_args = list(site.slurm.srun_args)
    if image:
        srun_args.append(f"--container-image={image}")
        if site.slurm.container_mounts:
            srun_args.append(f"--container-mounts={','.join(site.slurm.container_mounts)}")
    if srun_args:
        lines.append(f"export FASTTRACK_SRUN_ARGS={_q(shlex.join(srun_args))}")
    lines += site.slurm_setup
    return lines


def render_array(layout: ShardLayout, array: ArraySpec, site: SiteProfile, opts: SlurmOptions) -> RenderedScript:
    gpus = opts.gpus_per_node if opts.gpus_per_node is not None else site.slurm.gpus_per_node
    if gpus is None:
        gpus = array.gpus_per_node
    name = job_name("ft", layout.scope, layout.tier, array.key)
    image = opts.container_image or site.slurm.container_image
    minutes = array_minutes(array, site)
    over = site.slurm.max_time_min is not None and minutes > site.slurm.max_time_min
    head = [
        "#!/bin/bash",
        f"# fasttrack: scope {layout.scope}, tier {layout.tier}: shards {_ranges(array.indices)} of {layout.count}",
        f"# each needs {array.nodes} node(s)" + (f" of {gpus} GPU(s)" if gpus else "") + "; the longest is "
        f"estimated at {array.max_wall_s / 3600:.2f} h (plan estimate x {site.slurm.time_factor:g} "
        f"+ {site.slurm.time_margin_min} min)",
    ]
    if over:
        head.append(
            f"# WARNING: that exceeds the site's max_time_min ({site.slurm.max_time_min}); use more shards "
            "(--shards) so each fits the partition's limit"
        )
    throttle = opts.max_parallel or site.slurm.max_parallel
    head += [
        f"#SBATCH --job-name={name}",
        f"#SBATCH --array={_ranges(array.indices)}" + (f"%{throttle}" if throttle else ""),
        f"#SBATCH --nodes={array.nodes}",
        "#SBATCH --ntasks-per-node=1",
    ]
    if gpus:
        head.append(f"#SBATCH --gpus-per-node={gpus}")
    head += [
        f"#SBATCH --time={slurm_time(min(minutes, site.slurm.max_time_min or minutes))}",
        f"#SBATCH --output={opts.job_dir / LOGS_DIR}/%x-%A_%a.out",
        "#SBATCH --open-mode=append",
    ]
    head += slurm_lines(layout, array.nodes, site.slurm.placement)
    head += _site_lines(site, opts.container_image, merge=False)
    validate = opts.validate_argv(
        site.slurm_validate_args,
        tier=layout.tier,
        shard=f"$SHARD/{layout.count}",
        out=Path(f"$JOB_DIR/{SHARDS_DIR}/shard-$SHARD-of-{layout.count}"),
        force=True,
    )
    body = [
        "",
        *_prelude(site, opts, image=image),
        'SHARD="${SLURM_ARRAY_TASK_ID:?this script runs as a Slurm array task}"',
        f'echo "fasttrack: shard $SHARD/{layout.count} as Slurm job ${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}'
        ' on ${SLURM_JOB_NODELIST} ($(date -Is))"',
        "# exec: scancel and the time limit (SIGTERM, then SIGKILL after KillWait) reach fasttrack itself,",
        "# which stops every engine and writes a partial bundle naming what did not finish",
        "exec " + site.slurm_fasttrack + " " + " ".join(_arg(a) for a in validate),
        "",
    ]
    return RenderedScript(name=f"array-{array.key}.sbatch", job_name=name, text="\n".join(head + body), array=array)


def _arg(a: str) -> str:
    """Quote an argument, leaving the script's ``$SHARD``/``$JOB_DIR`` expandable."""
    if "$" in a:
        return '"' + a.replace('"', '\\"') + '"'
    return _q(a)


def _ranges(ix: list[int]) -> str:
    """``[1, 2, 3, 7]`` as ``1-3,7``."""
    runs: list[list[int]] = []
    for i in sorted(ix):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def render_merge(layout: ShardLayout, site: SiteProfile, opts: SlurmOptions) -> RenderedScript:
    name = job_name("ft", layout.scope, layout.tier, "merge")
    head = [
        "#!/bin/bash",
        f"# fasttrack: merge the {layout.count} shard bundles of scope {layout.scope}, tier {layout.tier};",
        "# submitted with --dependency=afterany on every shard array (it runs whatever became of them)",
        f"#SBATCH --job-name={name}",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=1",
        f"#SBATCH --time={slurm_time(site.slurm.merge.time_min)}",
        f"#SBATCH --output={opts.job_dir / LOGS_DIR}/%x-%j.out",
        *_site_lines(site, opts.container_image, merge=True),
    ]
    body = [
        "",
        *_prelude(site, opts, image=None),
        'echo "fasttrack: merging as Slurm job ${SLURM_JOB_ID} ($(date -Is))"',
        f"exec {site.slurm_fasttrack} slurm merge {_q(opts.job_dir)}",
        "",
    ]
    return RenderedScript(name="merge.sbatch", job_name=name, text="\n".join(head + body))


def render_submit_sh(arrays: list[RenderedScript], merge: RenderedScript) -> str:
    """A plain-shell submitter (what ``fasttrack slurm submit`` does, for hosts without fasttrack)."""
    lines = [
        "#!/bin/bash",
        "# Submit every shard array, then the merge job after all of them (afterany).",
        "# `fasttrack slurm submit` does the same and records the job ids for `fasttrack slurm status`.",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        "ids=()",
    ]
    for r in arrays:
        lines.append(f'ids+=("$(sbatch --parsable {r.name} | cut -d";" -f1)")')
    lines += [
        'dep="afterany$(printf \':%s\' "${ids[@]}")"',
        f'merge="$(sbatch --parsable --dependency="$dep" {merge.name} | cut -d";" -f1)"',
        'echo "arrays: ${ids[*]}  merge: $merge"',
        'echo "watch: squeue -j $(IFS=,; echo "${ids[*]},$merge")"',
        "",
    ]
    return "\n".join(lines)


@dataclass
class SlurmRender:
    layout: ShardLayout
    arrays: list[RenderedScript]
    merge: RenderedScript
    submit_sh: str
    job: dict[str, Any]

    def texts(self) -> dict[str, str]:
        """Every file of the job folder, by name."""
        import json

        out = {r.name: r.text for r in self.arrays}
        out[self.merge.name] = self.merge.text
        out["submit.sh"] = self.submit_sh
        out[JOB_FILE] = json.dumps(self.job, indent=2) + "\n"
        return out


def render(layout: ShardLayout, site: SiteProfile, opts: SlurmOptions) -> SlurmRender:
    arrays = [render_array(layout, a, site, opts) for a in layout.arrays]
    merge = render_merge(layout, site, opts)
    job = {
        "executor": "slurm",
        "model": opts.model,
        **layout.as_dict(),
        "job_dir": str(opts.job_dir),
        "sign_keys": [str(k) for k in opts.validate.sign_keys],
        "image": opts.container_image or site.slurm.container_image,
        "pr": opts.pr_record(),
        "arrays": [
            {
                "script": r.name,
                "job_name": r.job_name,
                "shards": r.array.indices if r.array else [],
                "nodes": r.array.nodes if r.array else 1,
                "time": next(
                    (ln.split("=", 1)[1] for ln in r.text.splitlines() if ln.startswith("#SBATCH --time=")), None
                ),
            }
            for r in arrays
        ],
        "merge": {"script": merge.name, "job_name": merge.job_name},
        "merged_bundle": f"{MERGED_DIR}/{MERGED_BUNDLE}",
        "submitted": None,
    }
    return SlurmRender(layout, arrays, merge, render_submit_sh(arrays, merge), job)


def write(rendered: SlurmRender, job_dir: Path) -> list[Path]:
    """Write the job folder (scripts, job description, ``logs/`` and ``shards/``)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / LOGS_DIR).mkdir(exist_ok=True)
    (job_dir / SHARDS_DIR).mkdir(exist_ok=True)
    written = []
    for name, text in rendered.texts().items():
        if name == JOB_FILE:
            save_job(job_dir, rendered.job)
        else:
            (job_dir / name).write_text(text)
            (job_dir / name).chmod(0o755)
        written.append(job_dir / name)
    return written
