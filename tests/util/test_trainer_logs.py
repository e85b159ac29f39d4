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
    read_event_files,
    read_trainer_state,
    reward_stream,
    series_name,
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
