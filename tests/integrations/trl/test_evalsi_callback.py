"""evalsi_callback in a real transformers Trainer (tiny Llama on the CPU): each save evaluated in order, in the
background or inside the save; a planted regression stops training; every / before / after and their model
copies; each evaluation logged once, at its checkpoint's step, to TensorBoard and the log history."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from evalsi.training.callback import evalsi_callback
from tests.integrations.torch.events import scalars
from tests.integrations.torch.models import Outcome
from tests.integrations.trl.tiny import tiny_model, tiny_tokenizer

TEXT = "what is 2+2 ? the answer is 4"
BOUND = 120.0  # seconds any wait below may take on a loaded machine before the test fails


@dataclass
class LMEvaluator:
    """Loads the saved checkpoint directory and measures its loss on a fixed text; ``regress_from`` plants a
    regression at that step and after, ``fail_at`` a failed evaluation. ``hold(step)`` makes an evaluation wait
    until training reached that step (evaluations slower than training steps, decided by events, not timing).
    ``trained`` (the trainer's step when the evaluation ran) tells whether training waited for it."""

    tokenizer: Any
    regress_from: int | None = None
    fail_at: int | None = None
    hold: Callable[[int | None], int] | None = None
    seen: list[int | None] = field(default_factory=list)
    losses: dict[int | None, float] = field(default_factory=dict)
    trained_at_evaluation: list[int] = field(default_factory=list)
    trained: list[int] = field(default_factory=lambda: [0])
    threads: set[str] = field(default_factory=set)
    progress: threading.Condition = field(default_factory=threading.Condition)

    def advance(self, step: int) -> None:
        with self.progress:
            self.trained[0] = step
            self.progress.notify_all()

    def evaluate(self, checkpoint: str | Path, step: int | None) -> Outcome:
        if self.hold is not None:
            until = self.hold(step)
            with self.progress:
                assert self.progress.wait_for(lambda: self.trained[0] >= until, BOUND), (
                    f"training never reached {until}"
                )
        self.trained_at_evaluation.append(self.trained[0])
        if self.fail_at is not None and step == self.fail_at:
            raise RuntimeError(f"planted failure at step {step}")
        model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint)
        ids = self.tokenizer(TEXT, return_tensors="pt").input_ids
        with torch.no_grad():
            loss = float(model(input_ids=ids, labels=ids).loss)
        self.seen.append(step)
        self.losses[step] = loss
        self.threads.add(threading.current_thread().name)
        planted = isinstance(step, int) and self.regress_from is not None and step >= self.regress_from
        return Outcome(step, loss, planted)


class StepCounter(transformers.TrainerCallback):
    """Tells the evaluator how far training got; ``finished`` maps a step to how many evaluations must have
    finished before training goes past it (so when a result becomes known is decided, not raced)."""

    def __init__(
        self,
        evaluator: LMEvaluator,
        stop_file: Path | None = None,
        touch_at: int = -1,
        runner: Any = None,
        finished: dict[int, int] | None = None,
    ) -> None:
        self.evaluator = evaluator
        self.stop_file = stop_file
        self.touch_at = touch_at
        self.runner = runner
        self.finished = finished or {}

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.evaluator.advance(state.global_step)
        if self.stop_file is not None and state.global_step == self.touch_at:
            self.stop_file.touch()
        count = self.finished.get(state.global_step)
        if count is not None:
            deadline = time.monotonic() + BOUND
            while len(self.runner.results) + len(self.runner.failures) < count:
                assert time.monotonic() < deadline, f"{count} evaluations never finished by step {state.global_step}"
                time.sleep(0.01)


class LogProbe(transformers.TrainerCallback):
    """Records every evaluation entry any callback's ``on_log`` receives: the step it was attributed to, and the
    step training had really reached when it arrived."""

    def __init__(self) -> None:
        self.trainer: Any = None
        self.entries: list[tuple[int, int, dict[str, float]]] = []

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
        if logs and "eval_step" in logs:
            self.entries.append((state.global_step, self.trainer.state.global_step, dict(logs)))


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
    """The evaluations in the log history, as (step, loss)."""
    return [(int(e["step"]), float(e["eval_toy/loss"])) for e in trainer.state.log_history if "eval_toy/loss" in e]


def test_each_save_is_evaluated_in_the_background_in_order_and_logged(tmp_path: Path, evaluator: LMEvaluator) -> None:
    # Each evaluation waits until training is two steps further (were training waiting for it, it would never
    # finish); the last two finish after training's last log, and are logged while train() drains them.
    evaluator.hold = lambda step: min((step or 0) + 2, 6)
    trainer = make_trainer(tmp_path, [evalsi_callback(evaluator), StepCounter(evaluator)], max_steps=6)
    trainer.train()
    assert evaluator.seen == [2, 4, 6]
    assert evaluator.threads == {"evalsi-checkpoints"}
    losses = logged(trainer)
    assert [step for step, _ in losses] == [2, 4, 6]  # each once, none lost
    assert [loss for _, loss in losses] == pytest.approx([evaluator.losses[step] for step in (2, 4, 6)])
    assert losses[0][1] > losses[-1][1]  # the model learned the text


def test_every_evaluation_reaches_tensorboard_once_at_its_checkpoints_step(
    tmp_path: Path, evaluator: LMEvaluator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Saves at 2, 4, ..., 12; training logs every 5 steps. The evaluation of step s is held until training
    # reached s + 3, and training goes past that step only once it has finished: several evaluations finish
    # between two training logs, and those of steps 10 and 12 only after the last one.
    evaluator.hold = lambda step: min((step or 0) + 3, 12)
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))  # transformers' TensorBoardCallback
    callback = evalsi_callback(evaluator)
    probe = LogProbe()
    counter = StepCounter(evaluator, runner=callback.runner, finished={5: 1, 7: 2, 9: 3, 11: 4, 12: 5})
    trainer = make_trainer(
        tmp_path,
        [callback, counter, probe],
        max_steps=12,
        logging_steps=5,
        report_to="tensorboard",
    )
    probe.trainer = trainer
    trainer.train()
    steps = [2, 4, 6, 8, 10, 12]
    assert evaluator.seen == steps

    points = scalars(tmp_path / "tb")
    assert not [tag for tag in points if tag.startswith("train/eval")]  # not renamed as a training metric
    assert [step for step, _ in points["eval/toy/loss"]] == steps  # each evaluation once, at its own step
    assert [value for _, value in points["eval/toy/loss"]] == pytest.approx([evaluator.losses[s] for s in steps])
    assert points["eval/step"] == [(step, float(step)) for step in steps]  # the explicit step metric
    assert [step for step, _ in points["train/loss"]] == [5, 10]  # training's own log is untouched

    assert [step for step, _ in logged(trainer)] == steps
    assert [loss for _, loss in logged(trainer)] == pytest.approx([evaluator.losses[s] for s in steps])
    history = [e for e in trainer.state.log_history if "eval_step" in e]
    assert [e["eval_step"] for e in history] == steps
    # every callback's on_log saw each evaluation once, with the checkpoint's step as state.global_step,
    # at the end of the training step in which it finished (10 and 12 while train() drained them)
    assert [(attributed, entry["eval_step"]) for attributed, _, entry in probe.entries] == [(s, s) for s in steps]
    assert [reached for _, reached, _ in probe.entries] == [6, 8, 10, 12, 12, 12]


def test_wait_evaluates_inside_the_save_before_the_next_step(tmp_path: Path, evaluator: LMEvaluator) -> None:
    probe = LogProbe()
    trainer = make_trainer(
        tmp_path, [evalsi_callback(evaluator, wait=True), StepCounter(evaluator), probe], max_steps=6
    )
    probe.trainer = trainer
    trainer.train()
    assert evaluator.seen == [2, 4, 6]
    assert evaluator.trained_at_evaluation == [2, 4, 6]
    assert evaluator.threads == {threading.current_thread().name}
    assert [(attributed, reached) for attributed, reached, _ in probe.entries] == [(2, 2), (4, 4), (6, 6)]


def test_a_planted_regression_stops_training_at_the_next_step(tmp_path: Path, evaluator: LMEvaluator) -> None:
    evaluator.regress_from = 4
    callback = evalsi_callback(evaluator, wait=True, stop_on_regression=True)
    trainer = make_trainer(tmp_path, [callback, StepCounter(evaluator)], max_steps=20)
    trainer.train()
    assert evaluator.seen == [2, 4]
    assert trainer.state.global_step == 5


def test_every_before_and_after_training(tmp_path: Path, evaluator: LMEvaluator) -> None:
    callback = evalsi_callback(evaluator, every=3, before_training=True, after_training=True, wait=True)
    trainer = make_trainer(tmp_path, [callback, StepCounter(evaluator)], max_steps=7, save_strategy="no")
    trainer.train()
    assert evaluator.seen == [None, 3, 6, 7]
    history = [e for e in trainer.state.log_history if "eval_toy/loss" in e]
    assert [(e["step"], e["eval_step"]) for e in history] == [(0, 0), (3, 3), (6, 6), (7, 7)]  # the base at step 0
    assert not (tmp_path / "out" / "evalsi-eval").exists()  # the model copies evalsi saved are gone once evaluated


def test_keep_copies_keeps_the_saved_models(tmp_path: Path, evaluator: LMEvaluator) -> None:
    callback = evalsi_callback(evaluator, every=3, before_training=True, after_training=True, keep_copies=True)
    trainer = make_trainer(tmp_path, [callback, StepCounter(evaluator)], max_steps=7, save_strategy="no")
    trainer.train()
    copies = tmp_path / "out" / "evalsi-eval"
    assert sorted(p.name for p in copies.iterdir()) == ["base", "step-3", "step-6", "step-7"]
    assert all((p / "config.json").exists() for p in copies.iterdir())


def test_a_copy_whose_evaluation_failed_is_kept(tmp_path: Path, evaluator: LMEvaluator) -> None:
    evaluator.fail_at = 6
    callback = evalsi_callback(evaluator, every=3, after_training=True)
    trainer = make_trainer(tmp_path, [callback, StepCounter(evaluator)], max_steps=7, save_strategy="no")
    trainer.train()
    assert evaluator.seen == [3, 7]
    assert [f.step for f in callback.runner.failures] == [6]
    copies = tmp_path / "out" / "evalsi-eval"
    assert [p.name for p in copies.iterdir()] == ["step-6"]  # to evaluate it again; the others are gone
    assert [e["eval_step"] for e in trainer.state.log_history if "eval_step" in e] == [3, 7]


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


def test_a_resumed_run_never_evaluates_its_checkpoint_as_the_base(tmp_path: Path, evaluator: LMEvaluator) -> None:
    first = make_trainer(tmp_path, [evalsi_callback(evaluator, before_training=True, wait=True)], max_steps=4)
    first.train()
    assert evaluator.seen == [None, 2, 4]
    base_loss = evaluator.losses[None]
    callback = evalsi_callback(evaluator, before_training=True, wait=True)
    resumed = make_trainer(tmp_path, [callback], max_steps=6)
    resumed.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-4"))
    assert evaluator.seen == [None, 2, 4, 6]  # no second "base": the model in hand was checkpoint-4's
    assert evaluator.losses[None] == base_loss


def test_a_relative_stop_file_is_the_working_directory_s_when_the_callback_was_made(
    tmp_path: Path, evaluator: LMEvaluator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    callback = evalsi_callback(None, stop_file="STOP")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # a training script that changes directory after building its callbacks
    trainer = make_trainer(tmp_path, [callback, StepCounter(evaluator, tmp_path / "STOP", touch_at=3)], max_steps=20)
    trainer.train()
    assert trainer.state.global_step == 4
