"""Checkpoint names, what counts as holding a model, discovery order and settle detection."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from evalsi.training import discover, parse_step
from evalsi.training._checkpoints import SettleTracker, find_model, signature
from tests.training.conftest import write_adapter, write_model


@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("checkpoint-500", 500),
        ("global_step_20", 20),
        ("step-7", 7),
        ("step-100.pt", 100),
        ("checkpoint-3.ckpt", 3),
        ("step-0", 0),
        ("checkpoint-", None),
        ("checkpoint-abc", None),
        ("runs", None),
        ("step_100", None),
        ("global-step-5", None),
        ("step-100.txt", None),
        ("xcheckpoint-5", None),
    ],
)
def test_parse_step(name: str, step: int | None) -> None:
    assert parse_step(name) == step


def test_full_weights_need_config_and_weights(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "checkpoint-1", weights=False)
    assert find_model(folder) is None  # config alone: still being written
    (folder / "model.safetensors").write_bytes(b"x")
    found = find_model(folder)
    assert found is not None and found.kind == "weights" and found.path == folder


def test_sharded_weights_need_every_shard_of_the_index(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "checkpoint-2", weights=False)
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "model-00001-of-00002.safetensors").write_bytes(b"x")
    assert find_model(folder) is None
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"x")
    assert find_model(folder) is not None
    (folder / "model.safetensors.index.json").write_text('{"weight_map": {"a": "mod')  # half-written index
    assert find_model(folder) is None


def test_adapter_state_dict_nested_and_partial_files(tmp_path: Path) -> None:
    adapter = write_adapter(tmp_path / "checkpoint-3")
    assert find_model(adapter) is not None and find_model(adapter).kind == "lora"  # type: ignore[union-attr]
    state = tmp_path / "step-4.pt"
    state.write_bytes(b"torch")
    found = find_model(state)
    assert found is not None and found.kind == "state-dict"
    assert find_model(tmp_path / "step-4.txt") is None
    verl = tmp_path / "global_step_5"
    write_model(verl / "actor" / "huggingface")
    nested = find_model(verl)
    assert nested is not None and nested.path == verl / "actor" / "huggingface"
    partial = write_model(tmp_path / "checkpoint-6")
    (partial / "model.safetensors.tmp").write_bytes(b"x")
    assert find_model(partial) is None
    assert find_model(tmp_path / "missing") is None


def test_discover_orders_by_step_and_ignores_other_names(tmp_path: Path) -> None:
    for name in ("checkpoint-1000", "checkpoint-200", "global_step_50", "runs", ".checkpoint-9", "logs.txt"):
        (tmp_path / name).mkdir()
    (tmp_path / "step-300.pt").write_bytes(b"x")
    (tmp_path / "step-400.json").write_bytes(b"x")
    assert [c.step for c in discover(tmp_path)] == [50, 200, 300, 1000]
    assert [c.name for c in discover(tmp_path)][-1] == "checkpoint-1000"
    assert discover(tmp_path / "nothing-yet") == []


def test_signature_changes_with_files(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "checkpoint-1")
    before = signature(folder)
    assert signature(folder) == before
    (folder / "extra.bin").write_bytes(b"x")
    assert signature(folder).digest != before.digest


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_settle_waits_for_stillness_by_modification_time(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "checkpoint-1")
    newest = signature(folder).newest
    clock = Clock(newest + 1.0)
    tracker = SettleTracker(settle=5.0, clock=clock)
    assert not tracker.settled(folder)
    assert tracker.settles_at(folder) == pytest.approx(newest + 5.0)
    clock.now = newest + 5.01
    assert tracker.settled(folder)


def test_settle_restarts_when_a_copy_keeps_old_times(tmp_path: Path) -> None:
    source = write_model(tmp_path / "src")
    os.utime(source / "model.safetensors", (1_000_000, 1_000_000))
    os.utime(source / "config.json", (1_000_000, 1_000_000))
    target = tmp_path / "checkpoint-1"
    target.mkdir()
    shutil.copy2(source / "config.json", target / "config.json")
    os.utime(target, (1_000_000, 1_000_000))
    clock = Clock(2_000_000.0)
    tracker = SettleTracker(settle=5.0, clock=clock)
    assert tracker.settled(target)  # looks old: a watcher starting late would evaluate it at once
    shutil.copy2(source / "model.safetensors", target / "model.safetensors")  # more arrives, with old times
    os.utime(target, (1_000_000, 1_000_000))
    assert not tracker.settled(target)  # the change was seen: wait again
    clock.now += 5.01
    assert tracker.settled(target)


def test_a_change_with_newer_times_is_dated_by_them_not_by_when_it_was_seen(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "checkpoint-1", weights=False)
    os.utime(folder / "config.json", (1_000, 1_000))
    os.utime(folder / "answers.json", (1_000, 1_000))
    os.utime(folder, (1_000, 1_000))
    clock = Clock(1_000.5)
    tracker = SettleTracker(settle=5.0, clock=clock)
    tracker.observe(folder)  # seen half-written
    (folder / "model.safetensors").write_bytes(b"x")
    os.utime(folder / "model.safetensors", (1_001, 1_001))
    os.utime(folder, (1_001, 1_001))
    clock.now = 1_004.0  # seen again later: still waits only until the last write + settle
    assert not tracker.settled(folder)
    assert tracker.settles_at(folder) == pytest.approx(1_006.0)
