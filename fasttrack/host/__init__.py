"""The host a run is on: its hardware (:mod:`~fasttrack.host.hardware`: GPUs, CPUs, memory, NVLink, and the match
with the scope's hardware and node model), whether the scope's engines fit it (:mod:`~fasttrack.host.fit`), the
model to serve (:mod:`~fasttrack.host.models`: as given, or built locally into the cache), and the preflight
``fasttrack doctor`` (:mod:`~fasttrack.host.doctor`, which reads the plan and the checks' rules: a layer above
the rest of the package, which imports none of it).
"""
