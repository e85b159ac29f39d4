"""Imported only by the symbolic pool's template process: warm the backends up, and die with the scoring process.

Workers forked from the template inherit the imported modules, compiled regexes and parser tables, so neither
the first comparison nor a replacement worker pays the ~1 s import. Nothing outlives the scoring process, even
when it is killed with SIGKILL: a watchdog thread ends the template when its parent is gone, and every child is
marked, right after the fork and before it reads anything, to be killed when the template exits.
"""

from __future__ import annotations

import os
import threading
import time

_PARENT = os.getppid()  # first, before the slow imports: the parent may die while we warm up

from evalsi.evaluators.rl.math_equiv._pool import load_libc, set_parent_death_signal  # noqa: E402
from evalsi.evaluators.rl.math_equiv._symbolic import warm_up  # noqa: E402


def _watch_parent() -> None:
    while os.getppid() == _PARENT:
        time.sleep(0.5)
    os._exit(0)


threading.Thread(target=_watch_parent, name="evalsi-math-template-watchdog", daemon=True).start()
load_libc()
os.register_at_fork(after_in_child=set_parent_death_signal)
warm_up()
