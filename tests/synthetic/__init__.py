"""Synthetic evidence bundles: invented figures written, signed and verified with the real bundle layer.

Used by the report, dashboard and security tests and by ``benchmarks/dashboard_scale.py`` (which puts
``tests/`` on ``sys.path``); it is test code and does not ship with fasttrack.

* :mod:`synthetic.results`: what a bundle holds (:class:`Spec`) and the invented check results;
* :mod:`synthetic.bundles`: how they become a signed bundle (:func:`make_bundle`), and the planted payloads.
"""

from __future__ import annotations

from synthetic.bundles import PAYLOADS, SUITES, make_bundle, payload_text
from synthetic.results import SHIPPED_CHECKS, Spec

__all__ = ["PAYLOADS", "SHIPPED_CHECKS", "SUITES", "Spec", "make_bundle", "payload_text"]
