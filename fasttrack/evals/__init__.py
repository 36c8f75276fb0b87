"""Model evaluations (AIME25, MRCR) through lm-eval, paired between baseline and candidate.

* :mod:`fasttrack.evals.datasets`: where an eval's data comes from (local file in the
  original format, or the hub) and its checks.
* :mod:`fasttrack.evals.samples`: which samples run (identical on both sides).
* :mod:`fasttrack.evals.runner`: lm-eval against one engine (per-sample outputs).
* :mod:`fasttrack.evals.mrcr`: OpenAI MRCR's grading rules and context bins.
* :mod:`fasttrack.evals.compare`: the paired comparison and its gates.
"""
