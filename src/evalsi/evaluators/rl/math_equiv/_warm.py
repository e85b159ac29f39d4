"""Imported only by the symbolic pool's template process: import the backends once and warm them up.

Workers forked from the template inherit the imported modules, compiled regexes and parser tables, so neither
the first comparison nor a replacement worker pays the ~1 s import.
"""

from __future__ import annotations

from evalsi.evaluators.rl.math_equiv._symbolic import warm_up

warm_up()
