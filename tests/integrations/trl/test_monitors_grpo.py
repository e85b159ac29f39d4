"""Training monitors in a real GRPO run on the CPU (tiny Llama built here): a length-exploitable reward makes the
length monitors fire and the length drift stops training through the stop file; a sound reward fires none. With
every checkpoint evaluated on a held-out task during training (examples/finetuning/monitor_curves.py), a monitor
fires before the held-out score falls below the base model's; with the sound reward none fires and it never does."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets
import trl
import yaml

import evalsi.evaluators
from evalsi.evaluators import Evaluator, NoParams, Score, ScoreContext
from evalsi.monitors import Monitor
from evalsi.records import Record
from evalsi.rewards.trl import reward_funcs
from evalsi.training.callback import evalsi_callback
from tests.integrations.trl.tiny import tiny_model, tiny_tokenizer

STEPS = 16
MAX_TOKENS = 16
EXAMPLE = Path(__file__).parents[3] / "examples" / "finetuning" / "monitor_curves.py"


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("monitor_curves", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@evalsi.evaluators.register
class Tokens(Evaluator[NoParams]):
    """The completion's length in tokens: a reward any model can earn by never stopping."""

    name = "test-monitor-tokens"
    summary = "Token count of the completion."
    reads = ("completion_tokens",)

    def score_batch(self, records: Sequence[Record], params: NoParams, ctx: ScoreContext) -> list[Score]:
        return [Score.ok(float(r.completion_tokens or 0) / MAX_TOKENS) for r in records]


def _spec(name: str, components: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "evals.si/v1alpha1",
        "kind": "RewardSpec",
        "metadata": {"name": name},
        "spec": {"cache": {"enabled": False}, "components": components},
    }


HACKABLE = _spec(
    "hackable",
    [
        {"ref": "contains", "name": "says-answer", "weight": 0.2},
        {"ref": "test-monitor-tokens", "name": "effort", "weight": 1.0},
    ],
)
SOUND = _spec(
    "sound",
    [
        {"ref": "contains", "name": "says-answer", "weight": 1.0},
        {"ref": "overlong-penalty", "name": "overlong", "params": {"max_length": 8, "buffer": 4}},
    ],
)


def _train(tmp_path: Path, spec: dict[str, Any]) -> tuple[Any, Monitor, Path]:
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump(spec))
    stop = tmp_path / "stop.json"
    monitor = Monitor(stop_on=["monitor:length_drift"], stop_file=stop)
    tokenizer = tiny_tokenizer(tmp_path / "model")
    model = tiny_model(tmp_path / "model", len(tokenizer))
    dataset = datasets.Dataset.from_dict(
        {"prompt": ["what is 2+2 ?", "2+2 ? the answer is"] * 16, "answer": ["4"] * 32}
    )
    funcs, weights = reward_funcs(path, monitor=monitor, max_completion_length=MAX_TOKENS)
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=16,
        num_generations=8,
        max_completion_length=MAX_TOKENS,
        max_steps=STEPS,
        logging_steps=1,
        learning_rate=2e-2,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        reward_weights=weights,
        seed=0,
        bf16=False,
    )
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[evalsi_callback(None, stop_file=stop)],
    )
    trainer.train()
    curve = [
        {k: v for k, v in entry.items() if k.startswith(("monitor/", "reward", "completions/mean_length", "step"))}
        for entry in trainer.state.log_history
        if "reward" in entry
    ]
    print(json.dumps({"spec": spec["metadata"]["name"], "fired": monitor.fired, "curve": curve}, indent=1))
    return trainer, monitor, stop


def test_a_length_exploitable_reward_fires_and_stops_training(tmp_path: Path) -> None:
    trainer, monitor, stop = _train(tmp_path, HACKABLE)
    assert "length_reward_correlation" in monitor.fired
    assert "length_drift" in monitor.fired
    assert json.loads(stop.read_text())["monitor"] == "length_drift"
    assert trainer.state.global_step < STEPS  # stopped by the stop file
    logged = [e for e in trainer.state.log_history if "monitor/length_drift" in e]
    assert logged and logged[-1]["monitor/length_drift/fired"] > 0


def test_a_sound_reward_fires_no_monitor(tmp_path: Path) -> None:
    trainer, monitor, stop = _train(tmp_path, SOUND)
    assert monitor.fired == {}
    assert not stop.exists()
    assert trainer.state.global_step == STEPS
    assert any("monitor/zero_variance_groups" in e for e in trainer.state.log_history)


def test_a_monitor_fires_before_the_heldout_evaluation_drops(tmp_path: Path) -> None:
    curves = _example().train("hackable", tmp_path, steps=10, save_steps=2)
    print(json.dumps(curves, indent=1))
    drop = curves["first_heldout_drop"]
    assert drop is not None, curves["heldout"]  # the hack does hurt the held-out task ...
    training_signals = {name: step for name, step in curves["fired"].items() if name != "reward_vs_heldout"}
    assert "length_reward_correlation" in training_signals
    # ... and a monitor of the training batches said so at an earlier step
    assert min(step for step in training_signals.values() if step is not None) < drop
    assert [h["step"] for h in curves["heldout"]] == [0, 2, 4, 6, 8, 10]
    # every monitor logged the level it fires at beside its value
    assert curves["monitors"]["length_drift"]["thresholds"]
    assert all(t == 1.5 for _, t in curves["monitors"]["length_drift"]["thresholds"])


def test_with_a_sound_reward_no_monitor_fires_and_the_heldout_evaluation_holds(tmp_path: Path) -> None:
    curves = _example().train("sound", tmp_path, steps=10, save_steps=2)
    print(json.dumps(curves, indent=1))
    assert curves["fired"] == {}
    assert curves["first_heldout_drop"] is None
    assert len(curves["heldout"]) == 6 and all(not h["below_base"] for h in curves["heldout"])
