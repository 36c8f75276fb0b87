"""The change under test: the paths a git diff base..head changed, classified against the scope's owned paths
and shared components, with the diff's hash and the refs' SHAs (:mod:`~fasttrack.change.diff`). The isolation
check (:mod:`fasttrack.checks.isolation`) records it in the bundle and ties it to the builds the engines served.
"""
