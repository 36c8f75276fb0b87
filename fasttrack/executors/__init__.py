"""Scale-out: hand a plan's shards to the schedulers that multi-node inference runs on.

* :mod:`~fasttrack.executors.shards`: which shards a plan has, how many nodes and GPUs
  each needs and how long it should take (from the plan's node model and estimate);
* :mod:`~fasttrack.executors.site`: the site profile (partition, account, extra
  ``#SBATCH`` lines, container image, Kubernetes namespace and volume, ...);
* :mod:`~fasttrack.executors.slurm`: sbatch scripts (one job array per node count and a
  merge job that depends on every array), ``submit`` and ``status`` from
  ``squeue``/``scontrol`` and the shard bundles present (never ``sacct``);
* :mod:`~fasttrack.executors.collect`: the merge step both schedulers run: every shard
  bundle present, every absent shard named with its job, state and log;
* :mod:`~fasttrack.executors.k8s`: Kubernetes manifests (an Indexed Job for single-node
  shards, a LeaderWorkerSet per multi-node shard, a shared volume, a merge Job), applied and
  read back with ``kubectl`` (:mod:`~fasttrack.executors.k8s_jobs`);
* :mod:`~fasttrack.executors.scheduler`: the interface both implement (render, write, submit,
  status, and what it knows of an absent shard), registered as the registry's kind ``scheduler``.

Nothing here schedules anything itself; the schedulers do.
"""

from fasttrack import registry

registry.BUILTIN_MODULES["scheduler"] = ("fasttrack.executors.slurm_jobs", "fasttrack.executors.k8s_jobs")
