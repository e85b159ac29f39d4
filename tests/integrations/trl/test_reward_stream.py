"""The training reward read back from a real GRPOTrainer's logs: its checkpoints' ``trainer_state.json`` and the
TensorBoard event files transformers writes, the same series from both (what ``evalsi view`` draws beside the
evaluations)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets
import pytest
import trl
import yaml
from torch.utils.tensorboard import SummaryWriter

from evalsi._util.trainer_logs import event_files, read_event_files, read_trainer_state, reward_stream
from evalsi.monitors import Monitor
from evalsi.rewards.trl import reward_funcs
from tests.integrations.trl.tiny import tiny_model, tiny_tokenizer

SPEC: dict[str, Any] = {
    "apiVersion": "evals.si/v1alpha1",
    "kind": "RewardSpec",
    "metadata": {"name": "stream"},
    "spec": {
        "cache": {"enabled": False},
        "components": [
            {"ref": "contains", "name": "says-answer", "weight": 0.5},
            {"ref": "overlong-penalty", "name": "overlong", "params": {"max_length": 6, "buffer": 3}},
        ],
    },
}


def test_a_grpo_run_s_reward_is_read_from_its_trainer_state_and_its_event_files(tmp_path: Path) -> None:
    spec = tmp_path / "reward.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    tokenizer = tiny_tokenizer(tmp_path / "model")
    model = tiny_model(tmp_path / "model", len(tokenizer))
    dataset = datasets.Dataset.from_dict(
        {"prompt": ["what is 2+2 ?", "what is 2+2 ? yes"] * 6, "answer": ["4", "5"] * 6}
    )
    funcs, weights = reward_funcs(spec, monitor=Monitor(), max_completion_length=6)
    out = tmp_path / "out"
    args = trl.GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=3,
        logging_steps=1,
        learning_rate=1e-3,
        report_to="tensorboard",
        use_cpu=True,
        save_strategy="steps",
        save_steps=1,
        reward_weights=weights,
        seed=0,
        bf16=False,
    )
    trainer = trl.GRPOTrainer(
        model=model, reward_funcs=funcs, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train()

    names = ["reward", "stream", "stream/overlong", "stream/says-answer"]
    # Only the first checkpoint evaluated so far: the newest trainer_state.json beside it has every step.
    stream = reward_stream([out / "checkpoint-1"])
    assert stream.source == str(out / "checkpoint-3" / "trainer_state.json"), stream.notes
    assert list(stream.series) == names and stream.steps == [1, 2, 3]
    for (_, total), (_, own) in zip(stream.series["reward"], stream.series["stream"], strict=True):
        assert total == pytest.approx(own, abs=1e-5)  # TRL trains on evalsi's total alone
    # The monitors the reward functions logged come with it, every step (a ratio to the run's start: 1 at first).
    assert {"length_drift", "truncation_rate", "zero_variance_groups"} <= set(stream.monitors), stream.monitors
    assert [s for s, _ in stream.monitors["length_drift"]] == [1, 2, 3]
    assert stream.monitors["length_drift"][0][1] == pytest.approx(1.0)
    # The same values from TensorBoard's event files (tagged train/...), read with tensorboard's own loader.
    events = event_files([out])
    assert events and all(e.is_relative_to(out / "runs") for e in events)
    logged = read_event_files(events)
    assert logged.notes == [] and list(logged.series) == names
    assert list(logged.monitors) == list(stream.monitors) and logged.fired == stream.fired
    for name, points in stream.monitors.items():
        assert [s for s, _ in logged.monitors[name]] == [s for s, _ in points]
        assert [v for _, v in logged.monitors[name]] == pytest.approx([v for _, v in points], rel=1e-5, abs=1e-6)
    for name in names:
        assert [s for s, _ in logged.series[name]] == [1, 2, 3]
        for (_, a), (_, b) in zip(logged.series[name], stream.series[name], strict=True):
            assert a == pytest.approx(b, rel=1e-5, abs=1e-6)
    # With no trainer_state.json at all (a trainer that only writes TensorBoard), the event files are read.
    for state in out.glob("checkpoint-*/trainer_state.json"):
        state.unlink()
    from_events = reward_stream([out / "checkpoint-2"])
    assert from_events.series == logged.series and from_events.monitors == logged.monitors
    assert from_events.source == ", ".join(map(str, events))
    assert (
        read_trainer_state(out / "checkpoint-2" / "trainer_state.json")
        .notes[0]
        .endswith("not readable (No such file or directory)")
    )


def test_a_truncated_event_file_gives_what_was_read_before_the_damage_and_a_note(tmp_path: Path) -> None:
    writer = SummaryWriter(str(tmp_path / "runs"))
    for step in range(1, 6):
        writer.add_scalar("train/reward", step / 10, step)
        writer.add_scalar("train/rewards/spec/fmt/mean", 1.0, step)
        writer.add_scalar("train/loss", 3.0, step)
        writer.add_scalar("train/monitor/length_drift", 1.0 + step / 10, step)
        writer.add_scalar("train/monitor/length_drift/fired", float(step >= 4), step)
    writer.close()
    (path,) = event_files([tmp_path])
    whole = read_event_files([path])
    assert whole.notes == [] and [s for s, _ in whole.series["reward"]] == [1, 2, 3, 4, 5]
    assert [v for _, v in whole.series["reward"]] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert whole.series["spec/fmt"] == [(s, 1.0) for s in range(1, 6)] and "loss" not in whole.series
    assert [s for s, _ in whole.monitors["length_drift"]] == [1, 2, 3, 4, 5]
    assert whole.monitors["length_drift"][-1][1] == pytest.approx(1.5) and whole.fired == {"length_drift": [4, 5]}
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] + b"\xff" * 3)  # cut in the middle, a damaged record at the end
    cut = read_event_files([path])
    assert 1 <= len(cut.series["reward"]) < 5 and cut.series["reward"][0][0] == 1
    assert cut.series["reward"][0][1] == pytest.approx(0.1)
    assert len(cut.notes) <= 1
