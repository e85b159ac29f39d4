"""The verl adapter, loaded from its file and called with the exact shapes verl's reward managers use.

verl's ``get_custom_reward_fn`` loads ``custom_reward_function.path`` as a fresh module and wraps the function
in ``partial(_call_with_kwargs, raw_fn, reward_kwargs)`` (config kwargs win); ``NaiveRewardManager`` then calls
``compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...)`` per sample (with
``num_turns`` and ``rollout_reward_scores`` added to ``extra_info``), and ``BatchRewardManager`` calls
``compute_score(data_sources=..., solution_strs=..., ground_truths=..., extra_infos=..., **reward_kwargs)``.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

import evalsi.rewards.verl
from evalsi.errors import DataError, RewardBatchError, SpecError
from evalsi.records import from_rollout
from evalsi.rewards._scorer import clear_shared
from tests.rewards._adapter_evaluators import CountingLength
from tests.rewards._keys import without_vector
from tests.rewards._servers import ServerThread, ServiceLog, reward_service_app

SPEC: dict[str, Any] = {
    "apiVersion": "evals.si/v1alpha1",
    "kind": "RewardSpec",
    "metadata": {"name": "verl-test"},
    "spec": {
        "components": [
            {"ref": "exact-match", "name": "exact", "weight": 0.5},
            {"ref": "test-adapters-in-tests", "name": "tests", "weight": 0.5},
            {"ref": "test-adapters-length", "name": "length", "weight": 0.0},
        ],
    },
}


class ArrayLike:
    """Stands in for the numpy arrays verl's parquet columns arrive as (anything with ``tolist``)."""

    def __init__(self, values: list[Any]) -> None:
        self.values = values

    def tolist(self) -> list[Any]:
        return list(self.values)


def _call_with_kwargs(raw_fn: Callable[..., Any], extra_kwargs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
    """verl/trainer/ppo/reward.py: config kwargs take precedence over call-time kwargs."""
    return raw_fn(*args, **{**kwargs, **extra_kwargs})


def load_like_verl(name: str, reward_kwargs: dict[str, Any]) -> Callable[..., Any]:
    path = evalsi.rewards.verl.__file__
    spec = importlib.util.spec_from_file_location("custom_module", path)
    assert spec is not None and spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return partial(_call_with_kwargs, getattr(module, name), reward_kwargs)


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    clear_shared()
    CountingLength.batches.clear()
    yield
    clear_shared()


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return path


def naive_call(fn: Callable[..., Any], solution: str, truth: Any, extra: dict[str, Any] | None) -> Any:
    info = dict(extra or {})
    info["num_turns"] = None
    info["rollout_reward_scores"] = {}
    return fn(data_source="openai/gsm8k", solution_str=solution, ground_truth=truth, extra_info=info)


def test_compute_score_returns_score_and_components(spec_file: Path) -> None:
    fn = load_like_verl("compute_score", {"spec": str(spec_file)})
    out = naive_call(fn, "42", "42", {"tests": ArrayLike(["42", "7"]), "index": 3})
    assert without_vector(out) == {
        "score": 1.0,
        "exact": 1.0,
        "tests": 1.0,
        "length": 2.0,
        "exact_skipped": 0.0,
        "tests_skipped": 0.0,
        "length_skipped": 0.0,
    }
    # a skipped component (no tests) reads 0.0: verl averages these keys with a plain mean; the flag counts it
    assert without_vector(naive_call(fn, "7", "42", None)) == {
        "score": 0.0,
        "exact": 0.0,
        "tests": 0.0,
        "length": 1.0,
        "exact_skipped": 0.0,
        "tests_skipped": 1.0,
        "length_skipped": 0.0,
    }


def test_test_cases_in_extra_info_reach_the_component(spec_file: Path) -> None:
    fn = load_like_verl("compute_score", {"spec": str(spec_file)})
    assert naive_call(fn, "b", "a", {"tests": ["a", "b"]})["tests"] == 1.0
    assert naive_call(fn, "c", "a", {"tests": ["a", "b"]})["tests"] == 0.0


def test_spec_is_loaded_once_per_process(spec_file: Path) -> None:
    first = load_like_verl("compute_score", {"spec": str(spec_file)})
    second = load_like_verl("compute_score", {"spec": str(spec_file)})  # a second copy of the module
    naive_call(first, "same", "x", None)
    naive_call(second, "same", "x", None)
    # one Reward (and so one score cache) for both calls: the second was a cache hit
    assert CountingLength.batches == [1]


def test_compute_score_batch_scores_in_one_call(spec_file: Path) -> None:
    fn = load_like_verl("compute_score_batch", {})  # BatchRewardManager passes reward_kwargs itself
    extras = [{"tests": ["1"], "rollout_reward_scores": {}}, {"rollout_reward_scores": {}}, {"tests": ["zz"]}]
    out = fn(
        data_sources=ArrayLike(["a", "b", "c"]).values,
        solution_strs=["1", "2", "333"],
        ground_truths=["1", None, "3"],
        extra_infos=extras,
        spec=str(spec_file),
    )
    assert CountingLength.batches == [3]
    assert [{k: v for k, v in without_vector(o).items() if not k.endswith("_skipped")} for o in out] == [
        {"score": 1.0, "exact": 1.0, "tests": 1.0, "length": 1.0},
        {"score": 0.0, "exact": 0.0, "tests": 0.0, "length": 1.0},
        {"score": 0.0, "exact": 0.0, "tests": 0.0, "length": 3.0},
    ]
    assert [(o["exact_skipped"], o["tests_skipped"]) for o in out] == [(0.0, 0.0), (1.0, 1.0), (0.0, 0.0)]


def test_batch_lengths_must_agree(spec_file: Path) -> None:
    with pytest.raises(ValueError, match="ground_truths has 1 items for 2 solution_strs"):
        evalsi.rewards.verl.compute_score_batch(["a", "b"], ["1", "2"], ["1"], None, spec=str(spec_file))


def test_spec_from_the_environment(spec_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSI_REWARD_SPEC", str(spec_file))
    assert evalsi.rewards.verl.compute_score("d", "1", "1")["score"] == 0.5


def test_missing_spec_says_how_to_set_it() -> None:
    with pytest.raises(SpecError, match=r"reward_kwargs\.spec"):
        evalsi.rewards.verl.compute_score("d", "1", "1")


def test_on_error_none_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "none.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "spec": {"onError": "none", "components": [{"ref": "exact-match"}]}}))
    with pytest.raises(SpecError, match=r"onError: none.*verl cannot skip"):
        evalsi.rewards.verl.compute_score("d", "1", "1", spec=str(path))


def test_on_error_raise_fails_the_call(tmp_path: Path) -> None:
    path = tmp_path / "raise.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "spec": {"components": [{"ref": "test-adapters-flaky"}]}}))
    with pytest.raises(RewardBatchError, match="said boom"):
        evalsi.rewards.verl.compute_score("d", "boom", None, spec=str(path))


def test_remote_scoring_batches_into_one_request(spec_file: Path) -> None:
    log = ServiceLog()
    with ServerThread(reward_service_app(log)) as server:
        fn = load_like_verl("compute_score_batch", {"spec": str(spec_file), "server": server.url})
        out = fn(
            data_sources=["a", "b"],
            solution_strs=["42", "x"],
            ground_truths=["42", "y"],
            extra_infos=[{"tests": ArrayLike(["42"])}, {}],
        )
    assert len(log.requests) == 1
    assert log.requests[0]["rollouts"][0]["tests"] == ["42"]
    local = evalsi.rewards.verl.compute_score_batch(
        ["a", "b"], ["42", "x"], ["42", "y"], [{"tests": ["42"]}, {}], spec=str(spec_file)
    )
    assert [without_vector(o) for o in out] == [without_vector(o) for o in local]
    assert not any(math.isnan(v) for item in out for v in item.values())


SAMPLES: list[tuple[Any, Any, Any, Any]] = [
    ("gsm8k", "42", "42", None),
    ("gsm8k", "42", None, {}),
    (ArrayLike(["d"]), "x", ArrayLike([1, 2]), {"tests": ArrayLike(["x"]), "index": 3, "num_turns": None}),
    ("d", "x", "y", {"data_source": "overridden", "split": "train"}),
    ("d", "x", "y", {"prompt": "Q?", "id": 7, "completion_tokens": 5}),  # fields a record reads itself
    ("d", "x", "y", {"reference": "from extra_info", "answer": "also"}),
    ("d", "x", None, {"answer": "the reference when verl sends none"}),
    ("d", "x", "y", {"completion": "lost to solution_str", "output": "kept as an alias"}),
    ("d", [{"role": "assistant", "content": "chat"}], "y", None),
    ("d", "x", "y", ArrayLike([1])),  # not a mapping: ignored
]


@pytest.mark.parametrize("field", [None, "reference", "answer"])
@pytest.mark.parametrize("sample", SAMPLES)
def test_records_built_directly_equal_the_rollouts_normalised(sample: Any, field: str | None) -> None:
    direct = evalsi.rewards.verl._records([sample], field)
    assert direct == [from_rollout(evalsi.rewards.verl.rollout(*sample), reference_field=field, index=0)]


def test_a_malformed_sample_names_its_index() -> None:
    with pytest.raises(DataError, match=r"rollout 1\b.*'completion' must be text"):
        malformed: list[Any] = [("d", "ok", None, None), ("d", 42, None, None)]
        evalsi.rewards.verl._records(malformed)
