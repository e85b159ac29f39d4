"""The params of ``math-equiv``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from evalsi.evaluators._base import Params

Backend = Literal["auto", "math-verify", "sympy", "none"]


class MathEquivParams(Params):
    """How answers are found and compared. The defaults suit GSM8K- and MATH-style rewards."""

    backend: Backend = "auto"
    """Symbolic backend for what the numeric fast path cannot decide: ``math-verify``, ``sympy``, ``none`` (text
    comparison only), or ``auto`` (math-verify if installed, else sympy, else none). ``pip install 'evalsi[math]'``
    installs both."""
    timeout: float = Field(default=1.0, gt=0, le=60)
    """Seconds of CPU time per symbolic comparison (not wall time, so a verdict does not depend on how busy the
    machine is); an overrunning comparison scores 0, and one stuck past a wall-clock backstop has its worker killed."""
    float_rounding: int = Field(default=6, ge=0, le=15)
    """Decimals math-verify rounds to inside structures it compares itself (matrices, sets, intervals)."""
    significant_digits: int = Field(default=6, ge=1, le=30)
    """A decimal answer matches a value when it is that value rounded at its last written digit and is written
    with at least this many significant digits (``0.333333`` is 1/3, ``0.3333`` is not; ``6.12e-8`` is not
    ``6.17e-8``). Between two decimals the coarser decides; exact values (integers, fractions, powers,
    factorials) always compare exactly."""
    rel_tol: float = Field(default=0.0, ge=0, lt=1)
    """Also accept numbers within this relative difference (0: off)."""
    percent: Literal["lenient", "strict"] = "lenient"
    """``lenient``: ``p%`` equals ``p/100`` and also ``p`` (``50%`` = ``0.5`` = ``50``). ``strict``: only ``p/100``."""
    last_number: bool = True
    r"""When no \boxed{}, <answer>, #### or "the answer is" is found, use the last number in the completion."""
    max_completion_chars: int = Field(default=200_000, gt=0)
    """Only the last this-many characters of a longer completion are searched (the final answer is at the end)."""
    max_answer_chars: int = Field(default=1_000, gt=0)
    """A longer extracted answer scores 0 without being parsed."""
    max_nesting: int = Field(default=60, gt=0)
    """An answer with brackets nested deeper than this scores 0 without being parsed."""
    workers: int = Field(default=0, ge=0)
    """Symbolic worker processes (0: one per CPU)."""
    worker_memory_mb: int = Field(default=2048, ge=0)
    """Address-space cap of each worker in MiB (0: none), so a runaway comparison fails instead of swapping."""
