"""The rehearsal operation: the local stand-in release path, end to end (`imagekit rehearsal`).

`steps`: one `imagekit …` sub-command per step, run as a process and recorded as a typed
`RehearsalStep`; `flow`: the steps in order, the three actors and the auditor, the index.
"""

from imagekit.rehearsal.flow import (
                                     RehearsalOutcome,
                                     accept_step,
                                     check_layers,
                                     check_out,
                                     closing_lines,
                                     decision_rows,
                                     run_rehearsal,
                                     volume_step,
)
from imagekit.rehearsal.steps import StepRunner, last_words, run_live, status_of

__all__ = ["RehearsalOutcome", "StepRunner", "accept_step", "check_layers", "check_out",
           "closing_lines", "decision_rows", "last_words", "run_live", "run_rehearsal", "status_of",
           "volume_step"]
