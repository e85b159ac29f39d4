"""The pytest plugin of evalsi (entry point ``pytest11``): command-line overrides for evaluation tests.

Each option sets the environment variable of the same meaning, which an ``@evaluation_test`` reads when it runs:
``--evalsi-passed-threshold`` (``EVALSI_PASSED_THRESHOLD``), ``--evalsi-num-runs`` (``EVALSI_NUM_RUNS``),
``--evalsi-max-rows`` (``EVALSI_MAX_ROWS``), ``--evalsi-completion-params`` (``EVALSI_COMPLETION_PARAMS``).
"""

from __future__ import annotations

import os
from typing import Any

OPTIONS = {
    "--evalsi-passed-threshold": ("EVALSI_PASSED_THRESHOLD", "a number, or JSON {success, standard_error}"),
    "--evalsi-num-runs": ("EVALSI_NUM_RUNS", "repetitions of every rollout"),
    "--evalsi-max-rows": ("EVALSI_MAX_ROWS", "use only the first N dataset rows (or 'all')"),
    "--evalsi-completion-params": ("EVALSI_COMPLETION_PARAMS", "JSON: one object or a list (a comparison)"),
}


def pytest_addoption(parser: Any) -> None:
    """Add the override options under an ``evalsi`` group."""
    group = parser.getgroup("evalsi", "evalsi evaluation tests")
    for option, (variable, help_text) in OPTIONS.items():
        group.addoption(option, default=None, help=f"{help_text} (sets {variable})")


_saved: list[dict[str, str | None]] = []


def pytest_configure(config: Any) -> None:
    """Export the options given as their environment variables, and declare the marker."""
    saved: dict[str, str | None] = {}
    for option, (variable, _) in OPTIONS.items():
        value = config.getoption(option.removeprefix("--").replace("-", "_"))
        if value is not None:
            saved[variable] = os.environ.get(variable)
            os.environ[variable] = str(value)
    _saved.append(saved)
    config.addinivalue_line("markers", "evaluation_test: an evalsi evaluation test (scores model rollouts)")


def pytest_unconfigure(config: Any) -> None:
    """Put the environment back as it was (pytest may run in-process, several times)."""
    if not _saved:
        return
    for variable, value in _saved.pop().items():
        if value is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = value
