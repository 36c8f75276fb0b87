"""``fasttrack validate``: scope -> host check -> plan -> checks over real engines -> bundle.

* :mod:`fasttrack.pipeline.options`: validate's options, declared once (the command line, the shards' runs).
* :mod:`fasttrack.pipeline.validate`: host check, check selection, the run itself.
* :mod:`fasttrack.pipeline.engines`: engine launch slots and driving the engine checks.
* :mod:`fasttrack.pipeline.record`: the run summary, the typed record the bundle is written from, the report.

The names below are imported from their modules on first use, so that reading the options (the executors'
command lines do) loads no engine and no check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fasttrack import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.pipeline.engines import RunState, engine_slots
    from fasttrack.pipeline.launch import EngineLaunch
    from fasttrack.pipeline.options import ValidateOptions
    from fasttrack.pipeline.validate import (
        ValidateOutcome,
        check_hardware,
        load_complete_scope,
        run_validate,
        select_checks,
    )

#: Public name -> defining module.
_EXPORTS: dict[str, str] = {
    "EngineLaunch": "launch",
    "RunState": "engines",
    "engine_slots": "engines",
    "ValidateOptions": "options",
    "ValidateOutcome": "validate",
    "check_hardware": "validate",
    "load_complete_scope": "validate",
    "run_validate": "validate",
    "select_checks": "validate",
}

__all__ = [
    "EngineLaunch",
    "RunState",
    "ValidateOptions",
    "ValidateOutcome",
    "check_hardware",
    "engine_slots",
    "load_complete_scope",
    "run_validate",
    "select_checks",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)
