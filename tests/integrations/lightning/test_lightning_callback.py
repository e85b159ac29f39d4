"""lightning_checkpoint_callback with a real Lightning Trainer on the CPU: evaluation after each real save, on
global rank zero, drained at the end and when training fails; retention that could delete a queued file refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from evalsi.training import lightning_checkpoint_callback
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
