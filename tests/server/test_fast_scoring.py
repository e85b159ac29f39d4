"""The Reward Service's fast path: request rollouts straight to records, cached batches answered on the event loop.

Checked against the library: the records equal ``from_rollout``'s, a malformed rollout is refused naming its index
and field (cold or warm cache, small or large batch), the request limits still apply, and every shared reward
vector scores exactly as in-process scoring does, cold and from the cache.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalsi.errors import DataError
from evalsi.records import from_rollout
from evalsi.rewards import from_mapping
from evalsi.rewards.vectors import load_vectors, rollouts, spec_body
from evalsi.rewards.wire import results_json
from evalsi.server._config import config_from_mapping
from evalsi.server._db import migrate, open_engine
from evalsi.server._errors import ServiceError
from evalsi.server._metrics import Metrics
from evalsi.server._token_store import TokenStore
from evalsi.server._tokens import RUN, Principal
from evalsi.server.rewards._records import records_of
from evalsi.server.rewards._service import INLINE_ROLLOUTS, RewardService
from tests.server.harness import ServerProcess, make_token, post_http, write_config

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "testdata" / "reward_vectors.json"
EXACT = {"components": [{"ref": "exact-match", "name": "exact"}]}

SHAPES: list[dict[str, Any]] = [
    {"completion": "4"},
    {"prompt": "2+2?", "completion": "4", "answer": "4", "completion_tokens": 3, "id": 7},
    {"input": "2+2?", "output": "4", "ground_truth": ["4", "four"], "data_source": "gsm8k", "extra": {"a": [1]}},
    {"prompt": "p", "input": "i", "completion": "c", "output": "o", "reference": None, "label": "L"},
    {"completion": "c", "reference": None, "solution": 3, "id": None, "completion_tokens": None},
    {"completion": [{"role": "assistant", "content": "x"}], "prompt": [{"role": "user", "content": "q"}]},
    {"completion": "c", "completion_ids": [1, 2, 3], "answer": "a"},
    {"completion": "c", "completion_tokens": 0, "my_ref": "r", "answer": "a"},
    {"completion": None, "output": "o", "prompt": None, "input": "i", "metadata": {"k": 1}},
    {"completion": "", "tests": [{"input": "1", "output": "2"}], "reference": "", "answer": "a"},
]


@pytest.mark.parametrize("reference_field", [None, "my_ref", "answer", "absent"])
def test_records_equal_the_librarys_for_every_rollout_shape(reference_field: str | None) -> None:
    vector_rollouts = [r for vector in load_vectors(VECTORS) for r in rollouts(vector)]
    batch = [*SHAPES, *vector_rollouts]
    expected = [from_rollout(r, reference_field=reference_field, index=i) for i, r in enumerate(batch)]
    assert records_of(batch, reference_field) == expected


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"prompt": "no completion"}, "'completion'"),
        ({"completion": 5}, "'completion'"),
        ({"completion": "c", "prompt": 3.5}, "'prompt'"),
        ({"completion": "c", "completion_tokens": -1}, "'completion_tokens'"),
        ({"completion": "c", "completion_tokens": True}, "'completion_tokens'"),
        ({"completion": "c", "completion_tokens": "12"}, "'completion_tokens'"),
        ({"completion": "c", "completion_ids": "1 2 3"}, "'completion_ids'"),
        ({"completion": [{"role": "assistant"}]}, "completion[0]"),
        (["completion", "c"], "mapping"),
    ],
)
def test_a_malformed_rollout_is_refused_naming_its_index_and_field(bad: Any, field: str) -> None:
    batch: list[Any] = [{"completion": "fine", "answer": "a"}] * 5
    batch = [*batch[:3], bad, *batch[3:]]
    with pytest.raises(DataError) as raised:
        records_of(batch)
    assert raised.value.index == 3
    assert str(raised.value).startswith("rollout 3: ")
    assert field in str(raised.value)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[RewardService]:
    url = f"sqlite:///{tmp_path / 'server.db'}"
    engine = open_engine(url)
    migrate(engine)
    config = config_from_mapping({"database": {"url": url}, "rewards": {"cpu_workers": 2, "project_share": 0.5}})
    service = RewardService(config, TokenStore(engine), None, Metrics())
    try:
        yield service
    finally:
        service.close()
        engine.dispose()


PRINCIPAL = Principal("alpha", frozenset({RUN}))


def test_a_cached_batch_is_answered_while_the_projects_cpu_share_is_busy(service: RewardService) -> None:
    batch = [{"completion": f"answer {i % 3}", "answer": "answer 1"} for i in range(64)]
    release = threading.Event()

    async def run() -> None:
        first = await service.score(PRINCIPAL, EXACT, batch)  # cold: scored, and cached
        assert [r.total for r in first] == [1.0 if i % 3 == 1 else 0.0 for i in range(64)]
        # the project's whole share of the cpu pool (one worker) is taken by work that waits
        hold = service.cpu.submit("alpha", release.wait, 120)
        try:
            warm = await asyncio.wait_for(service.score(PRINCIPAL, EXACT, batch), 60)
            assert warm == first
            # a batch with a miss does need the pool: it waits for the share
            fresh = asyncio.ensure_future(service.score(PRINCIPAL, EXACT, [*batch, {"completion": "new"}]))
            await asyncio.sleep(0.2)
            assert not fresh.done()
        finally:
            release.set()
        assert len(await asyncio.wait_for(fresh, 60)) == 65
        assert hold.result(60) is True

    asyncio.run(run())


@pytest.mark.parametrize("size", [8, INLINE_ROLLOUTS + 1])
def test_a_malformed_rollout_in_a_cached_batch_names_its_index(service: RewardService, size: int) -> None:
    batch = [{"completion": f"c{i % 4}", "answer": "c1"} for i in range(size)]

    async def run() -> None:
        await service.score(PRINCIPAL, EXACT, batch)  # every good rollout is now cached
        for bad, field in (
            ({"answer": "c1"}, "'completion'"),
            ({"completion": "c1", "completion_tokens": -2}, "'completion_tokens'"),
        ):
            broken = [*batch[:5], bad, *batch[5:]]
            with pytest.raises(ServiceError) as raised:
                await service.score(PRINCIPAL, EXACT, broken)
            error = raised.value
            assert (error.status, error.code, error.fields["index"]) == ("invalid_argument", "invalid_rollout", 5)
            assert error.message.startswith("rollout 5: ") and field in error.message

    asyncio.run(run())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    directory = tmp_path_factory.mktemp("fast")
    config = write_config(
        directory,
        {"database": {"url": "sqlite:///server.db"}, "rewards": {"max_rollouts": 40, "max_request_bytes": 4096}},
    )
    token = make_token(f"sqlite:///{directory / 'server.db'}", "alpha", ["evaluations.run"])
    with ServerProcess(config) as process:
        yield process, token


def test_every_reward_vector_scores_as_in_process_cold_and_cached(server: tuple[ServerProcess, str]) -> None:
    process, token = server
    compared = 0
    for vector in load_vectors(VECTORS):
        body, batch = spec_body(vector), rollouts(vector)
        try:
            reward = from_mapping(body)
            local: Any = results_json(reward.score(batch))
        except Exception as exc:  # the server must refuse it too, with the same kind of error
            local = type(exc).__name__
        for attempt in ("cold", "cached"):
            response = post_http(process, token, body, batch)
            if isinstance(local, str):
                assert response.status_code in (400, 422), (vector["name"], attempt, response.text)
                continue
            assert response.status_code == 200, (vector["name"], attempt, response.text)
            assert response.json() == local, (vector["name"], attempt)
            compared += 1
    assert compared > 20


def test_the_request_limits_still_apply_on_the_fast_path(server: tuple[ServerProcess, str]) -> None:
    process, token = server
    small = [{"completion": "a", "answer": "a"}] * 3
    assert post_http(process, token, EXACT, small).status_code == 200
    too_many = post_http(process, token, EXACT, small * 14)
    assert too_many.status_code == 400
    assert too_many.json()["error"]["code"] == "too_many_rollouts"
    too_large = post_http(process, token, EXACT, [{"completion": "x" * 5000}])
    assert too_large.status_code == 413
    assert "rewards.max_request_bytes=4096" in too_large.json()["error"]["message"]
    broken = post_http(process, token, EXACT, [*small, {"completion": ["not", "messages"]}])
    assert broken.status_code == 400
    error = broken.json()["error"]
    assert (error["code"], error["index"]) == ("invalid_rollout", 3)
    assert "'completion'" in error["message"]
