"""evalsi_callback in a real transformers Trainer (tiny Llama on the CPU): each save evaluated in order, in the
background or inside the save; a planted regression stops training; every / before / after; metrics in the log."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from evalsi.training.callback import evalsi_callback
from tests.integrations.torch.models import Outcome
from tests.integrations.trl.tiny import tiny_model, tiny_tokenizer

TEXT = "what is 2+2 ? the answer is 4"


@dataclass
class LMEvaluator:
    """Loads the saved checkpoint directory and measures its loss on a fixed text; ``regress_from`` plants a
    regression at that step and after. ``trained`` (the trainer's step when the evaluation ran) tells whether
    training waited for it."""

    tokenizer: Any
    regress_from: int | None = None
    seen: list[int | None] = field(default_factory=list)
    trained_at_evaluation: list[int] = field(default_factory=list)
    trained: list[int] = field(default_factory=lambda: [0])
    threads: set[str] = field(default_factory=set)

    def evaluate(self, checkpoint: str | Path, step: int | None) -> Outcome:
        self.trained_at_evaluation.append(self.trained[0])
        model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint)
        ids = self.tokenizer(TEXT, return_tensors="pt").input_ids
        with torch.no_grad():
            loss = float(model(input_ids=ids, labels=ids).loss)
        self.seen.append(step)
        self.threads.add(threading.current_thread().name)
        planted = isinstance(step, int) and self.regress_from is not None and step >= self.regress_from
        return Outcome(step, loss, planted)


class StepCounter(transformers.TrainerCallback):
    def __init__(self, evaluator: LMEvaluator, stop_file: Path | None = None, touch_at: int = -1) -> None:
        self.evaluator = evaluator
        self.stop_file = stop_file
        self.touch_at = touch_at

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.evaluator.trained[0] = state.global_step
        if self.stop_file is not None and state.global_step == self.touch_at:
            self.stop_file.touch()


class Texts(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self, tokenizer: Any) -> None:
        self.ids = tokenizer(TEXT, return_tensors="pt").input_ids[0]

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids, "labels": self.ids}


def make_trainer(tmp_path: Path, callbacks: list[Any], max_steps: int, **args: Any) -> transformers.Trainer:
    tokenizer = tiny_tokenizer(tmp_path / "model")
    model = tiny_model(tmp_path / "model", len(tokenizer))
    options: dict[str, Any] = {
        "output_dir": str(tmp_path / "out"),
        "per_device_train_batch_size": 2,
        "max_steps": max_steps,
        "learning_rate": 1e-2,
        "logging_steps": 1,
        "report_to": "none",
        "use_cpu": True,
        "save_strategy": "steps",
        "save_steps": 2,
        "seed": 0,
        "disable_tqdm": True,
    }
    options.update(args)
    return transformers.Trainer(
        model=model,
        args=transformers.TrainingArguments(**options),
        train_dataset=Texts(tokenizer),
        processing_class=tokenizer,
        callbacks=callbacks,
    )


@pytest.fixture
def evaluator(tmp_path: Path) -> LMEvaluator:
    return LMEvaluator(tiny_tokenizer(tmp_path / "tok"))


def logged(trainer: transformers.Trainer) -> list[tuple[int, float]]:
    return [(int(e["step"]), float(e["eval/toy/loss"])) for e in trainer.state.log_history if "eval/toy/loss" in e]


def test_each_save_is_evaluated_in_the_background_in_order_and_logged(tmp_path: Path, evaluator: LMEvaluator) -> None:
    trainer = make_trainer(tmp_path, [evalsi_callback(evaluator), StepCounter(evaluator)], max_steps=6)
    trainer.train()
    assert evaluator.seen == [2, 4, 6]
    assert evaluator.threads == {"evalsi-checkpoints"}
    losses = logged(trainer)
    assert len(losses) == 3  # every evaluation reached trainer.state.log_history, pending ones drained at the end
    assert losses[0][1] > losses[-1][1]  # the model learned the text


def test_wait_evaluates_inside_the_save_before_the_next_step(tmp_path: Path, evaluator: LMEvaluator) -> None:
    trainer = make_trainer(tmp_path, [evalsi_callback(evaluator, wait=True), StepCounter(evaluator)], max_steps=6)
    trainer.train()
    assert evaluator.seen == [2, 4, 6]
    assert evaluator.trained_at_evaluation == [2, 4, 6]
    assert evaluator.threads == {threading.current_thread().name}


def test_a_planted_regression_stops_training_at_the_next_step(tmp_path: Path, evaluator: LMEvaluator) -> None:
    evaluator.regress_from = 4
    callback = evalsi_callback(evaluator, wait=True, stop_on_regression=True)
    trainer = make_trainer(tmp_path, [callback, StepCounter(evaluator)], max_steps=20)
    trainer.train()
    assert evaluator.seen == [2, 4]
    assert trainer.state.global_step == 5


def test_every_before_and_after_training(tmp_path: Path, evaluator: LMEvaluator) -> None:
    callback = evalsi_callback(evaluator, every=3, before_training=True, after_training=True, wait=True)
    trainer = make_trainer(tmp_path, [callback, StepCounter(evaluator)], max_steps=7, save_steps=100)
    trainer.train()
    assert evaluator.seen == [None, 3, 6, 7]
    assert (tmp_path / "out" / "evalsi-eval" / "base" / "config.json").exists()
    history = [e for e in trainer.state.log_history if "eval/toy/loss" in e]
    assert "eval/toy/loss/base" in history[0]


def test_a_stop_file_stops_training_without_an_evaluator(tmp_path: Path, evaluator: LMEvaluator) -> None:
    stop = tmp_path / "STOP"
    trainer = make_trainer(
        tmp_path,
        [evalsi_callback(None, stop_file=stop), StepCounter(evaluator, stop, touch_at=3)],
        max_steps=20,
    )
    trainer.train()
    assert trainer.state.global_step == 4


def test_save_total_limit_with_background_evaluation_is_refused(tmp_path: Path, evaluator: LMEvaluator) -> None:
    trainer = make_trainer(tmp_path, [evalsi_callback(evaluator)], max_steps=4, save_total_limit=1)
    with pytest.raises(ValueError, match="save_total_limit=1"):
        trainer.train()
