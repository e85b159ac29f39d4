"""The states of an evaluation job, as its row stores them: read by the jobs and by the evaluators.

A job is active (``VALIDATING``, ``RUNNING``, ``WRITING_RESULTS``) until it reaches a terminal state
(``COMPLETED``, ``FAILED``, ``CANCELLED``); deleting an evaluator an active job uses is refused.
"""

from __future__ import annotations

VALIDATING, RUNNING, WRITING_RESULTS = "VALIDATING", "RUNNING", "WRITING_RESULTS"
COMPLETED, FAILED, CANCELLED = "COMPLETED", "FAILED", "CANCELLED"
ACTIVE_STATES = (VALIDATING, RUNNING, WRITING_RESULTS)
TERMINAL_STATES = (COMPLETED, FAILED, CANCELLED)
