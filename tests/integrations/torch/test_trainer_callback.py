"""evalsi_callback with transformers' own TrainingArguments, TrainerState and TrainerControl."""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerControl, TrainerState, TrainingArguments

from evalsi.training import CheckpointEvaluator, Endpoint
from evalsi.training.callback import evalsi_callback
from tests.helpers.openai_server import OpenAIServer
from tests.training.conftest import answers, write_model, write_spec


def test_saves_are_evaluated_and_a_regression_stops_training(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "specs")
    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[])
    with OpenAIServer(answers=answers(), default="?") as server:
        evaluator = CheckpointEvaluator(
            spec, "hf", Endpoint(server.base_url, "m"), regression=["exact-match:0.1"], log_dir=tmp_path / "logs"
        )
        evaluator.evaluate("base", None)
        callback = evalsi_callback(evaluator, stop_on_regression=True, wait=True)
        state, control = TrainerState(), TrainerControl()
        for step, wrong in ((5, 0), (10, 15)):
            state.global_step = step
            write_model(tmp_path / "out" / f"checkpoint-{step}")
            server.answers = answers(wrong)  # type: ignore[assignment]
            callback.on_save(args, state, control)
            callback.on_step_end(args, state, control)
            assert control.should_training_stop is (step == 10)
        callback.on_train_end(args, state, control)
    assert [step for step, _ in callback.runner.results] == [5, 10]
    assert (tmp_path / "logs" / "hf" / "forgetting" / "step-10.json").exists()


def test_stop_file_alone_stops_training(tmp_path: Path) -> None:
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[])
    callback = evalsi_callback(None, stop_file=tmp_path / "STOP")
    state, control = TrainerState(), TrainerControl()
    callback.on_step_end(args, state, control)
    assert not control.should_training_stop
    (tmp_path / "STOP").write_text("{}")
    callback.on_step_end(args, state, control)
    assert control.should_training_stop


def test_a_real_trainer_run_evaluates_each_save_served_in_process(tmp_path: Path) -> None:
    import torch
    from transformers import PreTrainedTokenizerFast, Trainer

    from evalsi.training import Transformers
    from tests.integrations.torch.test_transformers_serving import tiny_model

    model = tiny_model(tmp_path / "init")
    tokenizer = PreTrainedTokenizerFast.from_pretrained(tmp_path / "init")
    tokenizer.pad_token = tokenizer.eos_token
    rows = [{"input_ids": torch.tensor([2, 3, 4, 5]), "labels": torch.tensor([2, 3, 4, 5])} for _ in range(8)]
    spec = write_spec(tmp_path / "specs")
    evaluator = CheckpointEvaluator(
        spec, "trainer", Transformers(), log_dir=tmp_path / "logs", overrides=["numSamples=2", "sampling.maxTokens=2"]
    )
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=4,
        save_steps=2,
        per_device_train_batch_size=2,
        use_cpu=True,
        report_to=[],
        logging_steps=100,
        save_strategy="steps",
    )
    callback = evalsi_callback(evaluator)
    Trainer(model=model, args=args, train_dataset=rows, processing_class=tokenizer, callbacks=[callback]).train()
    assert [step for step, _ in callback.runner.results] == [2, 4]  # drained before train() returned
    assert all(outcome.complete for _, outcome in callback.runner.results)
    assert sorted(p.name for p in (tmp_path / "logs" / "trainer" / "forgetting").iterdir()) == [
        "step-2.json",
        "step-4.json",
    ]


def test_pytorch_hook_publishes_state_dicts_atomically_and_evaluates_them(tmp_path: Path) -> None:
    import os

    import torch

    from evalsi.training import PyTorchCheckpointHook, Transformers
    from evalsi.training._checkpoints import find_model
    from tests.integrations.torch.test_transformers_serving import tiny_model

    model = tiny_model(tmp_path / "base")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    spec = write_spec(tmp_path / "specs")
    evaluator = CheckpointEvaluator(
        spec,
        "pt",
        Transformers(base_model=str(tmp_path / "base")),
        log_dir=tmp_path / "logs",
        overrides=["numSamples=2", "sampling.maxTokens=2"],
    )
    old = os.umask(0o027)
    try:
        with PyTorchCheckpointHook(evaluator) as hook:
            for step in (100, 200):
                hook.save(model, tmp_path / "checkpoints" / f"step-{step}.pt", step, optimizer=optimizer)
    finally:
        os.umask(old)
    saved = tmp_path / "checkpoints" / "step-200.pt"
    assert sorted(p.name for p in saved.parent.iterdir()) == ["step-100.pt", "step-200.pt"]  # no temporary left
    assert saved.stat().st_mode & 0o777 == 0o640
    assert set(torch.load(saved, weights_only=True)) == {"model", "step", "optimizer"}
    assert find_model(saved).kind == "state-dict"  # type: ignore[union-attr]
    assert [step for step, _ in hook.runner.results] == [100, 200]
    assert all(outcome.complete for _, outcome in hook.runner.results), hook.runner.failures  # type: ignore[attr-defined]
