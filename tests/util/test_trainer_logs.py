"""Reading the training reward from a trainer's own logs: ``trainer_state.json`` and what goes wrong with it."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from evalsi._util.trainer_logs import (
    TOTAL,
    collect,
    collect_monitors,
    collect_thresholds,
    monitor_key,
    read_event_files,
    read_trainer_state,
    reward_stream,
    series_name,
    threshold_key,
)


def grpo_history(steps: list[int]) -> list[dict[str, Any]]:
    """``log_history`` as TRL's GRPOTrainer writes it with evalsi's reward functions (spec ``gsm``, two components)."""
    history: list[dict[str, Any]] = []
    for step in steps:
        history.append(
            {
                "step": step,
                "epoch": step / 100,
                "loss": 0.01,
                "reward": step / 100,
                "reward_std": 0.2,
                "rewards/gsm/mean": step / 100,
                "rewards/gsm/std": 0.3,
                "rewards/gsm/correct/mean": step / 200,
                "rewards/gsm/correct/std": 0.1,
                "rewards/gsm/format/mean": 1.0,
                "rewards/gsm/format/std": 0.0,
                "completions/mean_length": 12.0,
                "kl": 0.001,
            }
        )
    history.append({"step": steps[-1], "train_runtime": 12.5, "train_loss": 0.02})  # the end-of-training entry
    return history


def trainer_state(folder: Path, history: Any, **extra: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trainer_state.json"
    path.write_bytes(orjson.dumps({"global_step": 0, "max_steps": 100, "log_history": history, **extra}))
    return path


def test_series_names_keep_the_reward_and_each_function_s_mean() -> None:
    assert series_name("reward") == TOTAL
    assert series_name("train/reward") == TOTAL
    assert series_name("rewards/gsm/correct/mean") == "gsm/correct"
    assert series_name("train/rewards/gsm/mean") == "gsm"
    for other in ("reward_std", "rewards/gsm/std", "eval/reward", "loss", "rewards/mean", "train/kl"):
        assert series_name(other) is None, other


def test_a_trl_trainer_state_gives_the_total_and_every_component_per_step(tmp_path: Path) -> None:
    path = trainer_state(tmp_path / "checkpoint-30", grpo_history([10, 20, 30]))
    stream = read_trainer_state(path)
    assert stream.notes == [] and stream.source == str(path)
    assert list(stream.series) == ["reward", "gsm", "gsm/correct", "gsm/format"]  # the total first
    assert stream.series["reward"] == [(10, 0.1), (20, 0.2), (30, 0.3)]
    assert stream.series["gsm/correct"] == [(10, 0.05), (20, 0.1), (30, 0.15)]
    assert stream.steps == [10, 20, 30]


def test_values_that_are_not_finite_numbers_are_left_out() -> None:
    series = collect([(1, "reward", math.nan), (2, "reward", 0.5), (3, "reward", True), (4, "reward", "x")])
    assert series == {"reward": [(2, 0.5)]}


@pytest.mark.parametrize(
    ("content", "note"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "no log_history list"),
        (b'{"log_history": {"step": 1}}', "no log_history list"),
    ],
)
def test_a_malformed_trainer_state_gives_a_note_naming_the_file(tmp_path: Path, content: bytes, note: str) -> None:
    path = tmp_path / "trainer_state.json"
    path.write_bytes(content)
    stream = read_trainer_state(path)
    assert stream.series == {}
    assert len(stream.notes) == 1 and str(path) in stream.notes[0] and note in stream.notes[0]


def test_entries_without_a_step_are_skipped_and_counted(tmp_path: Path) -> None:
    history = [{"reward": 1.0}, "junk", {"step": "3", "reward": 2.0}, {"step": 4, "reward": 0.25}]
    stream = read_trainer_state(trainer_state(tmp_path, history))
    assert stream.series == {"reward": [(4, 0.25)]}
    assert stream.notes == [f"{tmp_path / 'trainer_state.json'}: 3 log_history entries without a step"]


def test_the_newest_trainer_state_beside_the_evaluated_checkpoints_is_read(tmp_path: Path) -> None:
    out = tmp_path / "out"
    trainer_state(out / "checkpoint-10", grpo_history([10]))
    newest = trainer_state(out / "checkpoint-40", grpo_history([10, 20, 30, 40]))
    os.utime(newest, ns=(2_000_000_000_000_000_000, 2_000_000_000_000_000_000))
    stream = reward_stream([out / "checkpoint-10"])  # only step 10 was evaluated so far
    assert stream.source == str(newest) and stream.steps == [10, 20, 30, 40]


def test_no_log_and_no_local_checkpoint_each_give_a_note(tmp_path: Path) -> None:
    (tmp_path / "out" / "checkpoint-5").mkdir(parents=True)
    empty = reward_stream([tmp_path / "out" / "checkpoint-5"])
    assert empty.series == {} and "no training reward logged in" in empty.notes[0]
    gone = reward_stream([tmp_path / "elsewhere" / "checkpoint-5"])
    assert gone.series == {} and "is on this machine: no trainer logs" in gone.notes[0]
    # a trainer_state.json without any reward key (an SFT run) says so too
    trainer_state(tmp_path / "out" / "checkpoint-5", [{"step": 5, "loss": 1.0}])
    sft = reward_stream([tmp_path / "out" / "checkpoint-5"])
    assert sft.series == {} and any("no training reward logged" in n for n in sft.notes)


def test_event_files_without_the_tensorboard_package_say_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = tmp_path / "out" / "runs" / "Dec01" / "events.out.tfevents.1.host"
    events.parent.mkdir(parents=True)
    events.write_bytes(b"\x00" * 16)
    (tmp_path / "out" / "checkpoint-5").mkdir()
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import tensorboard now raises ImportError
    monkeypatch.setitem(sys.modules, "tensorboard.backend.event_processing.event_file_loader", None)
    stream = reward_stream([tmp_path / "out" / "checkpoint-5"])
    assert stream.series == {}
    assert any("pip install 'evalsi[tensorboard]'" in note for note in stream.notes)
    assert read_event_files([events]).notes == stream.notes[:1]


def monitored_history(steps: list[int], fired_from: int) -> list[dict[str, Any]]:
    """``grpo_history`` with the monitors evalsi's TRL reward functions log (averaged per logging step)."""
    history = grpo_history(steps)
    for entry in history[:-1]:
        step = entry["step"]
        fired = 1.0 if step >= fired_from else 0.0
        entry.update(
            {
                "monitor/length_drift": 1.0 + step / 100,
                "monitor/length_drift/fired": fired,
                "monitor/zero_variance_groups": 0.25,
                "monitor/zero_variance_groups/fired": 0.0,
                "monitor/sandbox/timeout": step / 1000,
            }
        )
    return history


def test_monitor_keys_name_the_signal_and_whether_it_is_the_fired_flag() -> None:
    assert monitor_key("monitor/length_drift") == ("length_drift", False)
    assert monitor_key("train/monitor/length_drift/fired") == ("length_drift", True)
    assert monitor_key("monitor/sandbox/timeout") == ("sandbox/timeout", False)
    for other in ("reward", "rewards/gsm/mean", "monitor/", "monitor//fired", "eval/monitor/x", "monitors/x"):
        assert monitor_key(other) is None, other


def test_a_trl_trainer_state_gives_each_monitor_per_step_and_the_steps_it_fired(tmp_path: Path) -> None:
    path = trainer_state(tmp_path / "checkpoint-40", monitored_history([10, 20, 30, 40], fired_from=30))
    stream = read_trainer_state(path)
    assert stream.notes == []
    assert list(stream.monitors) == ["length_drift", "sandbox/timeout", "zero_variance_groups"]
    assert stream.monitors["length_drift"] == [(10, 1.1), (20, 1.2), (30, 1.3), (40, 1.4)]
    assert stream.monitors["sandbox/timeout"] == [(10, 0.01), (20, 0.02), (30, 0.03), (40, 0.04)]
    assert stream.fired == {"length_drift": [30, 40]}  # zero_variance_groups never fired
    assert list(stream.series) == ["reward", "gsm", "gsm/correct", "gsm/format"]  # the reward as before


def test_malformed_monitor_values_are_left_out_and_a_partly_fired_step_counts() -> None:
    entries = [
        (1, "monitor/length_drift", 1.0),
        (2, "monitor/length_drift", math.nan),
        (3, "monitor/length_drift", "1.6"),
        (4, "monitor/length_drift", None),
        (5, "monitor/length_drift", True),
        (6, "monitor/length_drift", math.inf),
        (7, "monitor/length_drift", 1.7),
        (1, "monitor/length_drift/fired", 0.0),
        (2, "monitor/length_drift/fired", "1"),
        (3, "monitor/length_drift/fired", math.nan),
        (4, "monitor/length_drift/fired", True),
        (7, "monitor/length_drift/fired", 0.5),  # fired in half the logging step's batches
        (8, "monitor/length_drift/fired", -1.0),
        (9, "monitor/duplicate_completions/fired", 0.0),
    ]
    series, fired = collect_monitors(entries)
    assert series == {"length_drift": [(1, 1.0), (7, 1.7)]}
    assert fired == {"length_drift": [7]}


def test_a_log_with_monitors_but_no_reward_is_read_and_one_without_either_says_so(tmp_path: Path) -> None:
    checkpoint = tmp_path / "out" / "checkpoint-5"
    trainer_state(checkpoint, [{"step": 5, "monitor/truncation_rate": 0.5, "monitor/truncation_rate/fired": 1}])
    stream = reward_stream([checkpoint])
    assert stream.series == {} and stream.monitors == {"truncation_rate": [(5, 0.5)]}
    assert stream.fired == {"truncation_rate": [5]} and stream.notes == [] and stream.steps == [5]
    trainer_state(checkpoint, [{"step": 5, "loss": 1.0}])
    bare = reward_stream([checkpoint])
    assert bare.monitors == {} and bare.fired == {} and any("no training reward logged" in n for n in bare.notes)


def test_a_monitor_s_logged_threshold_is_read_apart_from_its_values() -> None:
    assert monitor_key("monitor/truncation_rate/threshold") is None
    assert threshold_key("train/monitor/truncation_rate/threshold") == "truncation_rate"
    assert threshold_key("monitor/truncation_rate") is None and threshold_key("monitor//threshold") is None
    entries = [
        (1, "monitor/truncation_rate", 0.3),
        (1, "monitor/truncation_rate/threshold", 0.4),
        (2, "train/monitor/truncation_rate/threshold", 0.45),
        (3, "monitor/truncation_rate/threshold", math.nan),
    ]
    assert collect_thresholds(entries) == {"truncation_rate": [(1, 0.4), (2, 0.45)]}
    series, _ = collect_monitors(entries)
    assert series == {"truncation_rate": [(1, 0.3)]}


def test_a_trainer_state_s_monitor_thresholds_reach_the_stream(tmp_path: Path) -> None:
    checkpoint = tmp_path / "out" / "checkpoint-5"
    trainer_state(
        checkpoint,
        [{"step": 5, "monitor/truncation_rate": 0.5, "monitor/truncation_rate/threshold": 0.6, "reward": 1.0}],
    )
    stream = reward_stream([checkpoint])
    assert stream.thresholds == {"truncation_rate": [(5, 0.6)]}
    assert stream.monitors == {"truncation_rate": [(5, 0.5)]}
