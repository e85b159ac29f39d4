"""Group-level evaluators: each rollout scored with the other rollouts of its group, through every adapter."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

import evalsi.evaluators
import evalsi.rewards.openrlhf
import evalsi.rewards.verl
from evalsi.evaluators import GroupEvaluator, GroupParams, Score, ScoreContext
from evalsi.records import Record
from evalsi.rewards import from_mapping
from evalsi.rewards._scorer import clear_shared
from evalsi.rewards.trl import reward_funcs


@evalsi.evaluators.register
class BestOfGroup(GroupEvaluator[GroupParams]):
    """1.0 for the longest completion of its group, else 0.0; fails on a group holding ``boom``."""

    name = "test-group-best"
    summary = "The longest completion of its group (test evaluator)."
    reads = ("completion", "prompt", "metadata")
    pack = "test"

    def score_group(self, records: Sequence[Record], params: GroupParams, ctx: ScoreContext) -> list[Score]:
        texts = [r.completion_text for r in records]
        if "boom" in texts:
            raise RuntimeError("boom in the group")
        longest = max(len(t) for t in texts)
        return [Score.ok(len(t) == longest) for t in texts]


def spec(*components: dict[str, Any], **body: Any) -> dict[str, Any]:
    return {
        "apiVersion": "evals.si/v1alpha1",
        "kind": "RewardSpec",
        "metadata": {"name": "group"},
        "spec": {**body, "components": list(components)},
    }


DIVERSITY = {"ref": "group-diversity", "name": "diversity"}


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    clear_shared()
    yield
    clear_shared()


def test_duplicates_within_a_group_share_the_credit() -> None:
    reward = from_mapping(spec(DIVERSITY))
    rollouts = [
        {"prompt": "p", "completion": "A"},
        {"prompt": "p", "completion": " a "},  # the same once case and spaces are normalised
        {"prompt": "p", "completion": "b"},
        {"prompt": "q", "completion": "A"},  # another group: unique there
    ]
    results = reward.score(rollouts)
    assert [r.total for r in results] == [0.5, 0.5, 1.0, 1.0]
    assert results[0].components["diversity"].reason == "the same completion as 1 other(s) of its group of 3"
    exact = from_mapping(spec({**DIVERSITY, "params": {"normalize": False}}))
    assert [r.total for r in exact.score(rollouts)] == [1.0, 1.0, 1.0, 1.0]


def test_identical_rollouts_are_scored_as_a_group_and_never_from_the_cache() -> None:
    reward = from_mapping(spec(DIVERSITY))  # the spec's cache is on by default
    assert [r.total for r in reward.score([{"prompt": "p", "completion": "x"}] * 4)] == [0.25] * 4
    # the same rollout in another group: a cached 0.25 would be wrong
    other = [{"prompt": "p", "completion": "x"}, {"prompt": "p", "completion": "y"}]
    assert [r.total for r in reward.score(other)] == [
        1.0,
        1.0,
    ]


def test_group_by_a_named_field_and_a_group_id() -> None:
    reward = from_mapping(spec({**DIVERSITY, "params": {"group_by": "metadata.index"}}))
    rollouts = [{"completion": "x", "index": 1}, {"completion": "x", "index": 1}, {"completion": "x", "index": 2}]
    assert [r.total for r in reward.score(rollouts)] == [0.5, 0.5, 1.0]
    default = from_mapping(spec(DIVERSITY))
    with_ids = [{"prompt": "p", "completion": "x", "group_id": g} for g in ("a", "b")]
    assert [r.total for r in default.score(with_ids)] == [1.0, 1.0]  # group_id wins over the shared prompt


def test_a_rollout_without_a_group_is_skipped_with_what_to_set() -> None:
    reward = from_mapping(spec(DIVERSITY, onError="raise"))
    result = reward.score([{"completion": "x"}])[0]
    assert result.components["diversity"].status == "skipped"
    assert "set params.group_by" in (result.components["diversity"].reason or "")


def test_a_failing_group_errors_its_own_rollouts_only() -> None:
    reward = from_mapping(spec({"ref": "test-group-best", "name": "best", "onError": "zero"}))
    rollouts = [
        {"prompt": "p", "completion": "short"},
        {"prompt": "p", "completion": "longest"},
        {"prompt": "q", "completion": "boom"},
    ]
    results = reward.score(rollouts)
    assert [r.components["best"].status for r in results] == ["ok", "ok", "error"]
    assert [r.total for r in results] == [0.0, 1.0, 0.0]
    assert "boom in the group" in (results[2].components["best"].reason or "")


def test_a_group_component_composes_with_gates() -> None:
    reward = from_mapping(
        spec({"ref": "contains", "name": "answer", "gate": True}, {**DIVERSITY, "weight": 0.5}, floor=-1.0)
    )
    rollouts = [{"prompt": "p", "completion": c, "reference": "4"} for c in ("4", "4", "the answer is 4", "5")]
    assert [r.total for r in reward.score(rollouts)] == [1.25, 1.25, 1.5, -1.0]


def test_trl_batches_group_by_prompt(tmp_path: Path) -> None:
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump(spec({"ref": "exact-match", "name": "exact"}, DIVERSITY)))
    funcs, weights = reward_funcs(path, vector=True)
    assert weights == [1.0, 1.0]
    prompts = ["2+2?", "2+2?", "3+3?", "3+3?"]  # TRL repeats each prompt num_generations times
    completions = ["4", "4", "6", "5"]
    kwargs = {"prompts": prompts, "completions": completions, "answer": ["4", "4", "6", "6"]}
    assert [f(**kwargs) for f in funcs] == [[1.0, 1.0, 1.0, 0.0], [0.5, 0.5, 1.0, 1.0]]


def test_verl_batch_groups_by_an_extra_info_field(tmp_path: Path) -> None:
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump(spec({**DIVERSITY, "params": {"group_by": "index"}})))
    out = evalsi.rewards.verl.compute_score_batch(
        ["d"] * 3, ["x", "x", "x"], ["r"] * 3, [{"index": 0}, {"index": 0}, {"index": 1}], spec=str(path)
    )
    assert [o["score"] for o in out] == [0.5, 0.5, 1.0]
    assert [o["reward/diversity"] for o in out] == [0.5, 0.5, 1.0]


def test_openrlhf_batch_groups_by_prompt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump(spec(DIVERSITY)))
    monkeypatch.setenv("EVALSI_REWARD_SPEC", str(path))
    out = evalsi.rewards.openrlhf.reward_func(["P: x", "P: x", "Q: x"], ["P: ", "P: ", "Q: "], None)
    assert out["rewards"] == [0.5, 0.5, 1.0]
