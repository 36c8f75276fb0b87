"""Planning a run: a scope's envelope expanded into config points, engine groups and shards
(:mod:`~fasttrack.planning.plan`), and what the plan costs (:mod:`~fasttrack.planning.cost`: the units, the
engine's speed model and the sums of the checks' own cost declarations).

What a tier can never run, by the registered checks' own rules, is :mod:`fasttrack.checks.passability`.
"""
