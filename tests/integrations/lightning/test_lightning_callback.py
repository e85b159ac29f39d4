"""lightning_checkpoint_callback with a real Lightning Trainer on the CPU: evaluation after each real save, on
global rank zero, drained at the end and when training fails; retention that could delete a queued file refused;
each evaluation logged once to the trainer's loggers at its checkpoint's step (TensorBoard read back)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from evalsi.training import lightning_checkpoint_callback
from tests.integrations.torch.events import scalars
from tests.integrations.torch.models import INPUTS, TARGETS, LossEvaluator, make_model


class Regression(pl.LightningModule):
    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.net = make_model()
        self.fail_at = fail_at

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.fail_at is not None and self.global_step == self.fail_at:
            raise RuntimeError("planted failure")
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class CkptEvaluator(LossEvaluator):
    """Lightning saves ``state_dict`` with the module's own prefix (``net.``): strip it, then evaluate."""

    def evaluate(self, checkpoint: str | Path, step: int | None) -> Any:
        saved = torch.load(checkpoint, weights_only=False)
        unwrapped = {
            "model": {k.removeprefix("net."): v for k, v in saved["state_dict"].items()},
            "step": saved["global_step"],
        }
        plain = Path(str(checkpoint) + ".plain.pt")
        torch.save(unwrapped, plain)
        outcome = super().evaluate(plain, step)
        plain.unlink()
        return outcome


def trainer(tmp_path: Path, callback: Any, max_steps: int) -> pl.Trainer:
    return pl.Trainer(
        max_steps=max_steps,
        callbacks=[callback],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        default_root_dir=tmp_path,
    )


def data() -> DataLoader[Any]:
    return DataLoader(TensorDataset(INPUTS, TARGETS), batch_size=16, shuffle=False)


def steps_in(journal: Path) -> list[int]:
    return [json.loads(line)["step"] for line in journal.read_text().splitlines()]


def test_each_saved_checkpoint_is_evaluated_after_it_is_written(tmp_path: Path) -> None:
    evaluator = CkptEvaluator(tmp_path / "journal.jsonl")
    callback = lightning_checkpoint_callback(
        evaluator,
        dirpath=tmp_path / "ckpt",
        every_n_train_steps=2,
        save_on_train_epoch_end=False,
    )
    trainer(tmp_path, callback, max_steps=6).fit(Regression(), data())
    assert steps_in(tmp_path / "journal.jsonl") == [2, 4, 6]
    assert len(list((tmp_path / "ckpt").glob("*.ckpt"))) == 3  # background mode keeps every checkpoint
    assert callback.runner.pending == 0 and not callback.runner.failures


def test_an_exception_mid_training_still_drains(tmp_path: Path) -> None:
    evaluator = CkptEvaluator(tmp_path / "journal.jsonl")
    callback = lightning_checkpoint_callback(
        evaluator,
        dirpath=tmp_path / "ckpt",
        every_n_train_steps=1,
        save_on_train_epoch_end=False,
    )
    with pytest.raises(RuntimeError, match="planted failure"):
        trainer(tmp_path, callback, max_steps=10).fit(Regression(fail_at=3), data())
    assert steps_in(tmp_path / "journal.jsonl") == [1, 2, 3]
    assert callback.runner.pending == 0


def test_stop_on_regression_stops_training_once_the_regression_is_known(tmp_path: Path) -> None:
    evaluator = CkptEvaluator(tmp_path / "journal.jsonl", regress_above=-1.0)  # every checkpoint regresses
    callback = lightning_checkpoint_callback(
        evaluator,
        wait=True,
        stop_on_regression=True,
        dirpath=tmp_path / "ckpt",
        every_n_train_steps=2,
        save_on_train_epoch_end=False,
    )
    fitted = trainer(tmp_path, callback, max_steps=20)
    fitted.fit(Regression(), data())
    assert steps_in(tmp_path / "journal.jsonl") == [2]
    assert fitted.global_step == 2  # evaluated inside the step-2 save, so no further step trains


@pytest.mark.parametrize("options", [{"save_top_k": 1}, {"save_last": True}])
def test_background_mode_refuses_retention_that_can_delete_a_queued_file(tmp_path: Path, options: Any) -> None:
    with pytest.raises(ValueError, match="save_top_k=-1"):
        lightning_checkpoint_callback(CkptEvaluator(tmp_path / "j"), dirpath=tmp_path, **options)
    lightning_checkpoint_callback(CkptEvaluator(tmp_path / "j"), dirpath=tmp_path, wait=True, **options)


class HeldCkptEvaluator(CkptEvaluator):
    """Holds the evaluation of step s until training reached ``hold[s]``."""

    def __init__(self, journal: Path, hold: dict[int, int]) -> None:
        super().__init__(journal)
        self.hold = hold
        self.trained = 0
        self.progress = threading.Condition()
        self.losses: dict[int, float] = {}

    def evaluate(self, checkpoint: str | Path, step: int | None) -> Any:
        until = self.hold.get(step or 0, 0)
        with self.progress:
            assert self.progress.wait_for(lambda: self.trained >= until, 120), f"never reached step {until}"
        outcome = super().evaluate(checkpoint, step)
        self.losses[step or 0] = outcome.loss
        return outcome


class Progress(pl.Callback):
    """Tells the evaluator each step training finished; at the steps in ``finished``, waits until that many
    evaluations are done (Lightning runs ModelCheckpoint's batch-end hook after this one)."""

    def __init__(self, evaluator: HeldCkptEvaluator, runner: Any, finished: dict[int, int]) -> None:
        self.evaluator = evaluator
        self.runner = runner
        self.finished = finished

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        with self.evaluator.progress:
            self.evaluator.trained = trainer.global_step
            self.evaluator.progress.notify_all()
        count = self.finished.get(trainer.global_step)
        deadline = time.monotonic() + 120
        while count is not None and len(self.runner.results) < count:
            assert time.monotonic() < deadline, f"{count} evaluations never finished"
            time.sleep(0.01)


def test_each_evaluation_reaches_the_loggers_once_at_its_checkpoints_step(tmp_path: Path) -> None:
    # Saves at 2, 4, 6, 8; the evaluation of step 2 finishes at step 5, of step 4 at step 7, and those of 6 and 8
    # only after the last step, while the callback drains them.
    evaluator = HeldCkptEvaluator(tmp_path / "journal.jsonl", {2: 5, 4: 7, 6: 8, 8: 8})
    callback = lightning_checkpoint_callback(
        evaluator, dirpath=tmp_path / "ckpt", every_n_train_steps=2, save_on_train_epoch_end=False
    )
    fitted = pl.Trainer(
        max_steps=8,
        callbacks=[callback, Progress(evaluator, callback.runner, {5: 1, 7: 2})],
        logger=pl.loggers.TensorBoardLogger(str(tmp_path / "tb"), name="run"),
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        default_root_dir=tmp_path,
    )
    fitted.fit(Regression(), data())
    points = scalars(tmp_path / "tb")
    assert [step for step, _ in points["eval/toy/loss"]] == [2, 4, 6, 8]  # each once, none lost at the end
    assert [value for _, value in points["eval/toy/loss"]] == pytest.approx([evaluator.losses[s] for s in (2, 4, 6, 8)])
    assert points["eval/step"] == [(2, 2.0), (4, 4.0), (6, 6.0), (8, 8.0)]
