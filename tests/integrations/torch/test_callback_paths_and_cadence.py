"""evalsi_callback in a real Trainer run: a spec kept in another folder with relative paths, and its ``every``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import TrainingArguments

from evalsi.training import CheckpointEvaluator
from evalsi.training.callback import evalsi_callback
from tests.training.conftest import write_spec


def test_a_relative_spec_and_log_dir_and_every_in_a_real_trainer_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from transformers import PreTrainedTokenizerFast, Trainer

    from evalsi.training import Transformers
    from tests.integrations.torch.test_transformers_serving import tiny_model

    monkeypatch.chdir(tmp_path)
    model = tiny_model(Path("init"))
    tokenizer = PreTrainedTokenizerFast.from_pretrained("init")
    tokenizer.pad_token = tokenizer.eos_token
    rows = [{"input_ids": torch.tensor([2, 3, 4, 5]), "labels": torch.tensor([2, 3, 4, 5])} for _ in range(12)]
    spec = write_spec(Path("evals"))
    document = json.loads(spec.read_text())
    document["spec"]["every"] = 4
    spec.write_text(json.dumps(document))
    evaluator = CheckpointEvaluator(
        "evals/forgetting.yaml",
        "trainer",
        Transformers(),
        log_dir="logs",
        overrides=["numSamples=2", "sampling.maxTokens=2"],
    )
    args = TrainingArguments(
        output_dir="out",
        max_steps=6,
        save_steps=2,
        per_device_train_batch_size=2,
        use_cpu=True,
        report_to=[],
        logging_steps=100,
        save_strategy="steps",
    )
    callback = evalsi_callback(evaluator)
    trainer = Trainer(model=model, args=args, train_dataset=rows, processing_class=tokenizer, callbacks=[callback])
    trainer.train()
    # saved at 2, 4 and 6: 2 is due for no spec (not served), 4 is (every: 4), 6 is the final step
    assert [step for step, _ in callback.runner.results] == [4, 6]
    assert sorted(p.name for p in (tmp_path / "logs" / "trainer" / "forgetting").iterdir()) == [
        "step-4.json",
        "step-6.json",
    ]
    assert not (tmp_path / "evals" / "logs").exists()
    # each evaluation reached the trainer's log once, at its checkpoint's step
    logged = [entry for entry in trainer.state.log_history if "eval_forgetting/exact-match" in entry]
    assert [entry["eval_step"] for entry in logged] == [4.0, 6.0]
    assert all(set(outcome.log_metrics()) == {"eval/forgetting/exact-match"} for _, outcome in callback.runner.results)
