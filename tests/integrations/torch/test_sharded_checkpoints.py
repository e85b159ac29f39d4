"""Sharded checkpoints written by the real libraries, converted once and served: a PyTorch distributed checkpoint
(``torch.distributed.checkpoint.save`` in one process, as FSDP's sharded state dict is saved) and a DeepSpeed ZeRO-2
checkpoint written by a real DeepSpeed engine on the CPU, converted by ``zero_to_fp32``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pytest
import torch
import torch.distributed.checkpoint as dcp
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.training import Transformers, discover
from evalsi.training._checkpoints import find_model
from evalsi.training._serving import model_ref
from evalsi.training._vllm import free_port
from tests.integrations.torch.test_transformers_serving import tiny_model
from tests.training.conftest import write_spec

HERE = Path(__file__).resolve().parent
SERVED = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")


def same_weights(folder: Path, expected: dict[str, torch.Tensor]) -> bool:
    loaded = AutoModelForCausalLM.from_pretrained(folder).state_dict()
    return all(torch.equal(loaded[k], v.to(loaded[k].dtype)) for k, v in expected.items() if k in loaded)


def ask(ref_served_url: str, model: str) -> httpx.Response:
    return httpx.post(
        f"{ref_served_url}/completions", timeout=60, json={"model": model, "prompt": "what is 2+2?", "max_tokens": 2}
    )


def test_a_torch_distributed_checkpoint_is_converted_once_and_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "base"
    model = tiny_model(base)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.25)  # the checkpoint is not the base model
    checkpoint = tmp_path / "out" / "checkpoint-10"
    dcp.save({"model": model.state_dict()}, checkpoint_id=str(checkpoint / "pytorch_model_fsdp_0"))
    for name in SERVED:
        if (base / name).exists():
            shutil.copy(base / name, checkpoint / name)
    assert [c.step for c in discover(tmp_path / "out")] == [10]
    found = find_model(checkpoint)
    assert found is not None and found.sharded is not None and found.sharded.format == "dcp"

    ref = model_ref(checkpoint, 10, "sharded run", convert_dir=tmp_path / "converted")
    assert ref.files is not None and ref.files.kind == "weights" and ref.files.sharded is None
    assert ref.files.path.parent == tmp_path / "converted" / "sharded-run"
    assert same_weights(ref.files.path, model.state_dict())
    converted = ref.files.path / "pytorch_model.bin"
    stamp = converted.stat().st_mtime_ns
    again = model_ref(checkpoint, 10, "sharded run", convert_dir=tmp_path / "converted")
    assert again.files == ref.files and again.fingerprint == ref.fingerprint  # reused: no second conversion
    assert converted.stat().st_mtime_ns == stamp
    with Transformers().serve(ref) as served:
        assert served.base_url is not None and ask(served.base_url, ref.served_name).status_code == 200

    # The command line converts it into converted/ of its log directory (relative to the working directory), and
    # evaluates the step.
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path / "specs")
    options = ["--step", "10", "-f", str(spec), "--training-run", "cli", "--log-dir", "logs"]
    options += ["--serve", "transformers", "--set", "numSamples=3", "--set", "sampling.maxTokens=2"]
    done = CliRunner().invoke(app, ["checkpoints", "eval", str(checkpoint), *options])
    assert done.exit_code == 0, done.output
    assert orjson.loads((tmp_path / "logs/cli/forgetting/step-10.json").read_bytes())["status"] == "complete"
    assert [p.name for p in (tmp_path / "logs/converted/cli").iterdir() if p.is_dir()] == [ref.files.path.name]


def test_a_torch_distributed_checkpoint_without_a_config_is_a_state_dictionary(tmp_path: Path) -> None:
    base = tmp_path / "base"
    model = tiny_model(base)
    checkpoint = tmp_path / "out" / "step-5"
    dcp.save({"model": model.state_dict()}, checkpoint_id=str(checkpoint))
    ref = model_ref(checkpoint, 5, "run", convert_dir=tmp_path / "converted")
    assert ref.files is not None and ref.files.kind == "state-dict" and ref.files.path.name == "model.pt"
    with Transformers(base_model=str(base)).serve(ref) as served:
        assert served.base_url is not None and ask(served.base_url, ref.served_name).status_code == 200


def test_a_deepspeed_zero_checkpoint_is_converted_with_zero_to_fp32(tmp_path: Path) -> None:
    base = tmp_path / "base"
    tiny_model(base)
    checkpoint = tmp_path / "out" / "checkpoint-1"
    writer = [sys.executable, str(HERE / "write_deepspeed_checkpoint.py"), str(base), str(checkpoint), str(free_port())]
    written = subprocess.run(writer, capture_output=True, text=True, timeout=600, check=False)
    assert written.returncode == 0, written.stderr[-3000:]
    assert (checkpoint / "latest").read_text().strip() == "global_step1"
    assert not (checkpoint / "model.safetensors").exists()  # the weights are only in the ZeRO shards
    found = find_model(checkpoint)
    assert found is not None and found.sharded is not None and found.sharded.format == "deepspeed"

    ref = model_ref(checkpoint, 1, "zero", convert_dir=tmp_path / "converted")
    assert ref.files is not None and ref.files.kind == "weights"
    assert (ref.files.path / "pytorch_model.bin").is_file() and (ref.files.path / "tokenizer.json").is_file()
    reference = torch.load(tmp_path / "out" / "reference.pt", weights_only=True)
    assert same_weights(ref.files.path, reference)
    assert not same_weights(ref.files.path, AutoModelForCausalLM.from_pretrained(base).state_dict())
    assert (tmp_path / "converted" / "zero" / f"{ref.files.path.name}.log").is_file()
    with Transformers().serve(ref) as served:
        assert served.base_url is not None and ask(served.base_url, ref.served_name).status_code == 200
