"""In-process serving when things go wrong, as a new user meets them: a Trainer checkpoint saved without its
tokenizer, a request longer than the model's context, a client that times out mid-generation, and the end of
the process while the model was still generating. What cannot work fails at once and plainly; nothing prints a
traceback or aborts the interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import orjson
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast, Trainer, TrainingArguments
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.training import CheckpointEvaluator, ServingError, Transformers
from evalsi.training._serving import model_ref
from tests.integrations.torch.test_transformers_serving import tiny_model
from tests.training.conftest import write_spec

ROOT = Path(__file__).resolve().parents[3]
NOISE = ("Traceback", "terminate called", "BrokenPipe", "Broken pipe", "ConnectionReset", "Exception occurred")


def trained_without_tokenizer(tmp_path: Path) -> tuple[Path, Path]:
    """A real Trainer run saving checkpoint-1 without processing_class: the base folder and the checkpoint."""
    base = tmp_path / "base"
    model = tiny_model(base)
    rows = [{"input_ids": torch.tensor([2, 3, 4, 5]), "labels": torch.tensor([2, 3, 4, 5])} for _ in range(4)]
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        save_steps=1,
        per_device_train_batch_size=2,
        use_cpu=True,
        report_to=[],
        save_strategy="steps",
    )
    Trainer(model=model, args=args, train_dataset=rows).train()
    checkpoint = tmp_path / "out" / "checkpoint-1"
    assert (checkpoint / "model.safetensors").exists() and not (checkpoint / "tokenizer.json").exists()
    return base, checkpoint


def test_a_checkpoint_saved_without_its_tokenizer_fails_at_once_or_uses_the_one_given(tmp_path: Path) -> None:
    base, checkpoint = trained_without_tokenizer(tmp_path)
    with (
        pytest.raises(ServingError, match=r"holds no tokenizer.*processing_class.*--tokenizer"),
        Transformers().serve(model_ref(checkpoint, 1, "t")),
    ):
        pass
    spec, logs = write_spec(tmp_path / "specs"), tmp_path / "logs"
    options = ["--step", "1", "-f", str(spec), "--training-run", "t", "--log-dir", str(logs), "-q"]
    options += ["--serve", "transformers", "--set", "numSamples=3", "--set", "sampling.maxTokens=2"]
    refused = CliRunner().invoke(app, ["checkpoints", "eval", str(checkpoint), *options])
    assert refused.exit_code == 1 and "holds no tokenizer" in refused.output, refused.output
    assert not (logs / "t" / "forgetting" / "step-1.json").exists()  # nothing was generated
    given = CliRunner().invoke(app, ["checkpoints", "eval", str(checkpoint), *options, "--tokenizer", str(base)])
    assert given.exit_code == 0, given.output
    assert orjson.loads((logs / "t" / "forgetting" / "step-1.json").read_bytes())["status"] == "complete"
    evaluator = CheckpointEvaluator(
        spec, "t2", Transformers(base_model=str(base)), log_dir=logs, overrides=["numSamples=3", "sampling.maxTokens=2"]
    )
    assert evaluator.evaluate(checkpoint, 1).complete  # the base model's tokenizer, when the base is given


def test_a_prompt_beyond_the_context_is_a_client_error_not_a_model_crash(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint-3"
    tiny_model(folder)  # 64 positions
    with Transformers().serve(model_ref(folder, 3, "t")) as served:
        url = f"{served.base_url}/completions"
        too_long = httpx.post(url, json={"model": served.model, "prompt": "hello", "max_tokens": 100}, timeout=60)
        assert too_long.status_code == 400 and "context is 64 tokens" in too_long.json()["error"]["message"]
        unset = httpx.post(url, json={"model": served.model, "prompt": "hello"}, timeout=60)
        assert unset.status_code == 200  # no max_tokens: as many as the context leaves, at most the default


def slow_model(folder: Path) -> None:
    """A model that never stops early and holds 4096 positions: a long generation takes seconds."""
    words = ["<eos>", "<unk>", *(f"w{i}" for i in range(64))]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>", unk_token="<unk>")
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(words), n_positions=4096, n_embd=64, n_layer=2, n_head=2)
    config.eos_token_id = config.bos_token_id = None
    model = GPT2LMHeadModel(config)
    model.generation_config.eos_token_id = model.generation_config.bos_token_id = None
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@pytest.mark.parametrize("command", ["eval", "watch"])
def test_clients_timing_out_mid_generation_leave_no_traceback_or_abort(tmp_path: Path, command: str) -> None:
    out = tmp_path / "out"
    slow_model(out / "checkpoint-1")
    spec = write_spec(tmp_path / "specs")
    where = [str(out / "checkpoint-1"), "--step", "1"] if command == "eval" else [str(out), "--once", "--settle", "0"]
    args = [*where, "-f", str(spec), "--training-run", "t", "--log-dir", str(tmp_path / "logs"), "-q"]
    args += ["--serve", "transformers", "--set", "numSamples=2", "--set", "sampling.maxTokens=4000"]
    args += ["--set", "target.timeout=1", "--set", "target.maxRetries=0"]  # each request gives up mid-generation
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "evalsi", "checkpoints", command, *args],
        env=env,
        capture_output=True,
        timeout=600,
        check=False,
    )
    err = done.stderr.decode()
    assert done.returncode == 1, err  # records failed to generate: exit 1, not an abort (134, or -6)
    assert not [noise for noise in NOISE if noise in err], err
    results = orjson.loads((tmp_path / "logs" / "t" / "forgetting" / "step-1.json").read_bytes())
    assert results["status"] == "partial" and all(
        "timed out" in r or "Timeout" in r for r in results["failed"].values()
    )


def test_a_client_gone_before_its_answer_prints_nothing(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    slow_model(tmp_path / "checkpoint-1")
    with Transformers().serve(model_ref(tmp_path / "checkpoint-1", 1, "t")) as served:
        existing = set(threading.enumerate())
        with pytest.raises(httpx.TimeoutException):
            body = {"model": served.model, "prompt": "w1 w2", "max_tokens": 4000}
            httpx.post(f"{served.base_url}/completions", json=body, timeout=0.5)
        handlers = [t for t in set(threading.enumerate()) - existing if "process_request_thread" in t.name]
        for thread in handlers:  # the generation ends (stopped early, or finished and answered nobody)
            thread.join(300)
        assert not [t for t in handlers if t.is_alive()]
    _, err = capfd.readouterr()
    assert not [noise for noise in NOISE if noise in err], err
