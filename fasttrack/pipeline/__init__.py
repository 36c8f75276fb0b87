"""``fasttrack validate``: scope -> host check -> plan -> checks over real engines -> bundle.

* :mod:`fasttrack.pipeline.validate`: options, host check, check selection, the run itself.
* :mod:`fasttrack.pipeline.engines`: engine launch slots and driving the engine checks.
* :mod:`fasttrack.pipeline.record`: the run summary, the typed record the bundle is written from, the report.
"""

from __future__ import annotations

from fasttrack.pipeline.engines import EngineLaunch, RunState, engine_slots
from fasttrack.pipeline.validate import (
    ValidateOptions,
    ValidateOutcome,
    check_hardware,
    load_complete_scope,
    run_validate,
    select_checks,
)

__all__ = [
    "EngineLaunch",
    "RunState",
    "ValidateOptions",
    "ValidateOutcome",
    "engine_slots",
    "check_hardware",
    "load_complete_scope",
    "run_validate",
    "select_checks",
]
