"""A real ``GRPOTrainer`` run with evalsi's reward functions, on a tiny model built here (nothing downloaded).

Two training steps on CPU; the logged metrics must hold the total and every component, and each generation
batch must have been scored once although TRL calls four reward functions on it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import datasets
import pytest
import trl
import yaml

import evalsi.evaluators
from evalsi.evaluators import Evaluator, NoParams, Score, ScoreContext
from evalsi.records import Record
from evalsi.rewards import load
from evalsi.rewards.trl import reward_funcs
from tests.integrations.trl.tiny import tiny_model, tiny_tokenizer


@evalsi.evaluators.register
class CountingTokens(Evaluator[NoParams]):
    """The completion's token count; records each batch it scores."""

    name = "test-grpo-counting"
    summary = "Token count of the completion (counts its calls)."
    reads = ("completion_tokens",)
    batches: ClassVar[list[int]] = []

    def score_batch(self, records: Sequence[Record], params: NoParams, ctx: ScoreContext) -> list[Score]:
        type(self).batches.append(len(records))
        return [Score.ok(float(r.completion_tokens or 0)) for r in records]


SPEC: dict[str, Any] = {
    "apiVersion": "evals.si/v1alpha1",
    "kind": "RewardSpec",
    "metadata": {"name": "grpo-tiny"},
    "spec": {
        "cache": {"enabled": False},
        "components": [
            {"ref": "contains", "name": "says-answer", "weight": 0.5},
            {"ref": "overlong-penalty", "name": "overlong", "params": {"max_length": 6, "buffer": 3}},
            {"ref": "test-grpo-counting", "name": "tokens", "weight": 0.01},
        ],
    },
}


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_grpo_trainer_logs_total_and_components(tmp_path: Path, asynchronous: bool) -> None:
    spec = tmp_path / "reward.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    tokenizer = tiny_tokenizer(tmp_path / "model")
    model = tiny_model(tmp_path / "model", len(tokenizer))
    dataset = datasets.Dataset.from_dict(
        {"prompt": ["what is 2+2 ?", "what is 2+2 ? yes"] * 4, "answer": ["4", "5"] * 4}
    )
    funcs, weights = reward_funcs(spec, asynchronous=asynchronous)
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=2,
        logging_steps=1,
        learning_rate=1e-3,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        reward_weights=weights,
        seed=0,
        bf16=False,
    )
    CountingTokens.batches.clear()
    trainer = trl.GRPOTrainer(
        model=model, reward_funcs=funcs, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train()

    logged = [entry for entry in trainer.state.log_history if "rewards/grpo-tiny/mean" in entry]
    assert len(logged) == 2
    for entry in logged:
        for name in ("grpo-tiny", "grpo-tiny/says-answer", "grpo-tiny/overlong", "grpo-tiny/tokens"):
            assert math.isfinite(entry[f"rewards/{name}/mean"]), (name, entry)
        # what is trained on is the total alone (the components have weight 0)
        assert entry["reward"] == pytest.approx(entry["rewards/grpo-tiny/mean"], abs=1e-5)
        assert 0.0 < entry["rewards/grpo-tiny/tokens/mean"] <= 6.0
        # each batch's scoring time, through TRL's log_metric
        assert entry["reward/latency_ms"] > 0.0
        assert 0.0 < entry["reward/latency_ms_per_rollout"] <= entry["reward/latency_ms"]
        # and the percentiles of each rollout's own scoring time, none above the batch's
        p50, p90, p99 = (entry[f"reward/latency_ms/p{q}"] for q in (50, 90, 99))
        assert 0.0 <= p50 <= p90 <= p99 <= entry["reward/latency_ms"]
    # one evaluator call per generation batch (two steps), though TRL called 4 reward functions on each; the
    # engine de-duplicates equal token counts within a batch, so a call holds at most 4 records
    assert len(CountingTokens.batches) == 2
    assert all(1 <= size <= 4 for size in CountingTokens.batches)


def test_a_loaded_reward_is_a_reward_function(tmp_path: Path) -> None:
    spec = tmp_path / "reward.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    tokenizer = tiny_tokenizer(tmp_path / "model")
    model = tiny_model(tmp_path / "model", len(tokenizer))
    dataset = datasets.Dataset.from_dict({"prompt": ["what is 2+2 ?"] * 4, "answer": ["4"] * 4})
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=1,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        seed=0,
        bf16=False,
    )
    trainer = trl.GRPOTrainer(
        model=model, reward_funcs=load(spec), args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "rewards/grpo-tiny/mean" in entry]
    assert len(logged) == 1 and math.isfinite(logged[0]["rewards/grpo-tiny/mean"])


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_grpo_trainer_normalises_each_component_of_the_vector(tmp_path: Path, asynchronous: bool) -> None:
    spec = tmp_path / "reward.yaml"
    body = {**SPEC["spec"], "components": [*SPEC["spec"]["components"], {"ref": "group-diversity", "weight": 0.2}]}
    spec.write_text(yaml.safe_dump({**SPEC, "spec": body}))
    tokenizer = tiny_tokenizer(tmp_path / "model")
    model = tiny_model(tmp_path / "model", len(tokenizer))
    dataset = datasets.Dataset.from_dict({"prompt": ["what is 2+2 ?"] * 4, "answer": ["4"] * 4})
    funcs, weights = reward_funcs(spec, asynchronous=asynchronous, vector=True)
    assert weights == [0.5, 1.0, 0.01, 0.2]
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=1,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        reward_weights=weights,
        multi_objective_aggregation="normalize_then_sum",
        seed=0,
        bf16=False,
    )
    trainer = trl.GRPOTrainer(
        model=model, reward_funcs=funcs, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "rewards/grpo-tiny/group-diversity/mean" in entry]
    assert len(logged) == 1
    entry = logged[0]
    for name in ("says-answer", "overlong", "tokens", "group-diversity"):
        assert math.isfinite(entry[f"rewards/grpo-tiny/{name}/mean"]), (name, entry)
    # one group of four completions: each scores 1/k for a completion k of them share
    assert 0.25 <= entry["rewards/grpo-tiny/group-diversity/mean"] <= 1.0
    assert entry["reward/latency_ms"] > 0.0
