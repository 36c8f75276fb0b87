"""The PR flow: a contributor's bundle onto a GitHub PR, verified by the maintainers' workflow.

- :mod:`fasttrack.pr.github`: the REST client (the few endpoints used; rate limits; dry runs)
- :mod:`fasttrack.pr.sticky`: the one fasttrack comment per PR, found by its marker
- :mod:`fasttrack.pr.body`: that comment's body (report comment + who checked it + bundle link)
- :mod:`fasttrack.pr.publish`: ``fasttrack pr publish`` (release asset + comment)
- :mod:`fasttrack.pr.fetch`: ``fasttrack pr fetch`` (maintainers' side: download, sha256 check)
- :mod:`fasttrack.pr.cli`: the ``fasttrack pr`` subcommands

``docs/pr-flow.md`` walks through the whole flow; ``examples/github/`` holds the workflow.
"""
