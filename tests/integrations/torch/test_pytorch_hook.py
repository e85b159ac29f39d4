"""PyTorchCheckpointHook with a real model trained on the CPU: atomic saves, background evaluation, DDP rank zero,
each evaluation logged once at its step (TensorBoard read back)."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel
from torch.utils.tensorboard import SummaryWriter

from evalsi.training import PyTorchCheckpointHook
from tests.integrations.torch.events import scalars
from tests.integrations.torch.models import LossEvaluator, make_model, train_steps


def journal_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_saves_are_evaluated_in_the_background_in_step_order(tmp_path: Path) -> None:
    evaluator = LossEvaluator(tmp_path / "journal.jsonl")
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with PyTorchCheckpointHook(evaluator) as hook:
        for step in (10, 20, 30):
            train_steps(model, optimizer, 10)
            hook.save(model, tmp_path / "checkpoints" / f"step-{step}.pt", step, optimizer=optimizer)
    entries = journal_lines(tmp_path / "journal.jsonl")
    assert [e["step"] for e in entries] == [10, 20, 30]
    assert [e["saved_step"] for e in entries] == [10, 20, 30]
    losses = [float(e["loss"]) for e in entries]  # type: ignore[arg-type]
    assert losses[0] > losses[-1]  # the model learned, and each file held that step's weights
    saved = torch.load(tmp_path / "checkpoints" / "step-30.pt", weights_only=True)
    assert set(saved) == {"model", "step", "optimizer"}
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-10.pt", "step-20.pt", "step-30.pt"]


def test_the_file_mode_follows_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        with PyTorchCheckpointHook(LossEvaluator(tmp_path / "j.jsonl"), wait=True) as hook:
            path = hook.save(make_model(), tmp_path / "step-1.pt", 1)
    finally:
        os.umask(old)
    assert path is not None
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_regression_is_seen_by_the_training_loop(tmp_path: Path) -> None:
    evaluator = LossEvaluator(tmp_path / "journal.jsonl")
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with PyTorchCheckpointHook(evaluator, wait=True) as hook:
        train_steps(model, optimizer, 20)
        first = hook.save(model, tmp_path / "step-20.pt", 20)
        evaluator.regress_above = hook.results[0][1].loss  # type: ignore[attr-defined]
        train_steps(model, optimizer, 20, lr_sign=-1.0)  # gradient ascent: the loss rises
        hook.save(model, tmp_path / "step-40.pt", 40)
        assert first is not None and hook.regressed


def _ddp_worker(rank: int, world: int, port: int, directory: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = DistributedDataParallel(make_model())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        evaluator = LossEvaluator(Path(directory) / f"journal-rank{rank}.jsonl")
        with PyTorchCheckpointHook(evaluator) as hook:
            for step in (5, 10):
                train_steps(model, optimizer, 5)
                written = hook.save(model, Path(directory) / f"step-{step}.pt", step)
                assert (written is not None) == (rank == 0)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.timeout(120)
def test_under_ddp_only_rank_zero_saves_and_evaluates(tmp_path: Path) -> None:
    mp.spawn(_ddp_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    assert [e["step"] for e in journal_lines(tmp_path / "journal-rank0.jsonl")] == [5, 10]
    assert not (tmp_path / "journal-rank1.jsonl").exists()
    saved = torch.load(tmp_path / "step-10.pt", weights_only=True)
    assert not any(key.startswith("module.") for key in saved["model"])  # the unwrapped model's names


class HeldEvaluator(LossEvaluator):
    """Holds each evaluation until the training loop says the step it waits for was reached."""

    def __init__(self, journal: Path, hold: dict[int, int]) -> None:
        super().__init__(journal)
        self.hold = hold
        self.trained = 0
        self.progress = threading.Condition()

    def advance(self, step: int) -> None:
        with self.progress:
            self.trained = step
            self.progress.notify_all()

    def evaluate(self, checkpoint: str | Path, step: int | None) -> Any:
        until = self.hold.get(step or 0, 0)
        with self.progress:
            assert self.progress.wait_for(lambda: self.trained >= until, 120), f"never reached step {until}"
        return super().evaluate(checkpoint, step)


def test_each_evaluation_is_logged_once_at_its_step_on_the_training_thread(tmp_path: Path) -> None:
    # Saves at 10, 20, 30, 40; the evaluation of step s waits until the loop reached s + 15 (40 for the last two),
    # so results finish between saves and the last two only when the hook drains them at exit.
    evaluator = HeldEvaluator(tmp_path / "journal.jsonl", {10: 25, 20: 35, 30: 40, 40: 40})
    writer = SummaryWriter(str(tmp_path / "tb"))
    threads: set[str] = set()
    loop = [0]
    calls: list[tuple[int, int]] = []

    def to_tensorboard(metrics: dict[str, float], step: int) -> None:
        threads.add(threading.current_thread().name)
        calls.append((step, loop[0]))
        for name, value in metrics.items():
            writer.add_scalar(name, value, step)

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with PyTorchCheckpointHook(evaluator, log=to_tensorboard) as hook:
        for step in range(1, 41):
            loop[0] = step
            train_steps(model, optimizer, 1)
            if step % 10 == 0:
                hook.save(model, tmp_path / "checkpoints" / f"step-{step}.pt", step)
            evaluator.advance(step)
            if step in (25, 35):  # the result is there before the next step's log_results
                deadline = time.monotonic() + 120
                while len(hook.runner.results) < (1 if step == 25 else 2):
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
            hook.log_results()
    writer.close()
    journal = [json.loads(line) for line in (tmp_path / "journal.jsonl").read_text().splitlines()]
    losses = {int(e["step"]): float(e["loss"]) for e in journal}
    points = scalars(tmp_path / "tb")
    assert [step for step, _ in points["eval/toy/loss"]] == [10, 20, 30, 40]  # each once, none lost at exit
    assert [value for _, value in points["eval/toy/loss"]] == pytest.approx([losses[s] for s in (10, 20, 30, 40)])
    assert points["eval/step"] == [(10, 10.0), (20, 20.0), (30, 30.0), (40, 40.0)]
    assert threads == {threading.current_thread().name}  # never from the evaluating thread
    assert calls == [(10, 25), (20, 35), (30, 40), (40, 40)]  # as soon as the loop could know each result
