"""An evaluator for the Ray tests, imported by every scorer actor: it logs what it scores, where, and can hang.

It writes one line per record it is asked to score (``pid completion``) to the file its ``log`` param names, so
a test sees across processes and nodes how often each rollout was computed, and by which actor.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import evalsi.evaluators as ev
from evalsi.records import Record


class ProbeParams(ev.Params):
    """Options of the probe evaluator."""

    log: str
    """File to append ``pid completion`` lines to."""
    delay: float = 0.0
    """Seconds to sleep per record (a slow evaluator)."""
    hang_on: str | None = None
    """A completion that hangs its batch the first time it is seen (the marker file records that)."""
    started: str | None = None
    """A file created when a batch starts (a test waits for it before killing the actor)."""


@ev.register
class Probe(ev.Evaluator[ProbeParams]):
    """Scores len(completion) / 10 and logs every record it scores."""

    name = "ray-probe"
    summary = "Test evaluator that logs the records it scores."
    params_model = ProbeParams
    reads = ("completion",)
    pack = "test"

    def score_batch(self, records: Sequence[Record], params: ProbeParams, ctx: ev.ScoreContext) -> list[ev.Score]:
        texts = [r.completion_text for r in records]
        if params.started:
            Path(params.started).write_text(str(os.getpid()))
        if params.hang_on is not None and params.hang_on in texts:
            marker = Path(params.log + ".hung")
            if not marker.exists():
                marker.write_text(str(os.getpid()))
                while True:  # a worker that never answers, until its actor is killed
                    time.sleep(1)
        with open(params.log, "a") as handle:
            handle.write("".join(f"{os.getpid()} {t}\n" for t in texts))
        if params.delay:
            time.sleep(params.delay * len(records))
        return [ev.Score.ok(len(t) / 10) for t in texts]


def scored(log: str | Path) -> list[tuple[int, str]]:
    """(pid, completion) of every record the probe scored, in order."""
    path = Path(log)
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        pid, _, text = line.partition(" ")
        out.append((int(pid), text))
    return out
