"""The engine's pool strategy: where each component runs, and what cancellation drops.

Every entry point (library, adapters, ``rewards serve``, the server, runs) scores through
:meth:`evalsi.rewards.Reward.component_scores`; these tests pin down the scheduling the server relies on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

import pytest

import evalsi.evaluators as ev
from evalsi.engine import Pools, ScoringCancelled
from evalsi.records import Record, from_rollout
from evalsi.rewards import from_mapping


class ThreadParams(ev.Params):
    tag: str = ""


class _Recorder:
    threads: ClassVar[list[tuple[str, str]]] = []
    lock = threading.Lock()

    @classmethod
    def note(cls, who: str) -> None:
        with cls.lock:
            cls.threads.append((who, threading.current_thread().name))


@ev.register
class ThreadCpu(ev.Evaluator[ThreadParams]):
    """Records which thread scored it."""

    name = "test-pools-cpu"
    summary = "Test: notes its thread."
    params_model = ThreadParams
    pack = "test"

    def score_batch(self, records: Sequence[Record], params: ThreadParams, ctx: ev.ScoreContext) -> list[ev.Score]:
        _Recorder.note(ctx.component)
        return [ev.Score.ok(1.0) for _ in records]


@ev.register
class ThreadCode(ThreadCpu):
    """Records which thread scored it, as a code component."""

    name = "test-pools-code"
    runs_code = True


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    _Recorder.threads = []
    yield


def _spec(*refs: str) -> dict[str, object]:
    components = [{"ref": ref, "name": f"c{i}", "params": {"tag": str(i)}} for i, ref in enumerate(refs)]
    return {"components": components, "cache": {"enabled": False}}


def test_code_goes_to_the_sandbox_pool_the_first_other_component_runs_inline_the_rest_on_the_pool() -> None:
    reward = from_mapping(_spec("test-pools-code", "test-pools-cpu", "test-pools-cpu"))
    records = [from_rollout({"completion": "x"})]
    with ThreadPoolExecutor(2, thread_name_prefix="cpu") as cpu, ThreadPoolExecutor(2, thread_name_prefix="box") as box:
        columns = reward.component_scores(records, pools=Pools(components=cpu, sandbox=box))
    where = dict(_Recorder.threads)
    assert where["c0"].startswith("box")
    assert where["c1"] == threading.current_thread().name
    assert where["c2"].startswith("cpu")
    assert [c[0].value for c in columns] == [1.0, 1.0, 1.0]


def test_a_lone_code_component_still_runs_on_the_sandbox_pool() -> None:
    reward = from_mapping(_spec("test-pools-code"))
    with ThreadPoolExecutor(1, thread_name_prefix="box") as box:
        reward.component_scores([from_rollout({"completion": "x"})], pools=Pools(sandbox=box))
    assert _Recorder.threads[0][1].startswith("box")


def test_without_a_sandbox_pool_code_is_scheduled_like_any_component() -> None:
    reward = from_mapping(_spec("test-pools-code"))
    reward.component_scores([from_rollout({"completion": "x"})])
    assert _Recorder.threads == [("c0", threading.current_thread().name)]


def test_observe_sees_every_scored_component_and_compose_applies_the_rules() -> None:
    reward = from_mapping({**_spec("test-pools-cpu", "test-pools-cpu"), "clip": [0, 1.5]})
    seen: list[str] = []
    columns = reward.component_scores(
        [from_rollout({"completion": "x"})], pools=Pools(observe=lambda job, scores, seconds: seen.append(job.name))
    )
    assert sorted(seen) == ["c0", "c1"]
    (result,) = reward.compose(columns)
    assert result.total == 1.5 and [r.name for r in reward.rules] == ["c0", "c1"]


def test_a_cancelled_call_runs_no_component() -> None:
    reward = from_mapping(_spec("test-pools-code", "test-pools-cpu"))
    cancelled = threading.Event()
    cancelled.set()
    with ThreadPoolExecutor(1) as box, pytest.raises(ScoringCancelled):
        reward.score_records([from_rollout({"completion": "x"})], pools=Pools(sandbox=box), cancelled=cancelled)
    assert _Recorder.threads == []
