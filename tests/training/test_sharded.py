"""Sharded checkpoints as trainers lay them out (file names from verl 0.9, DeepSpeed 0.19, torch DCP): found, only
once every shard is there, and, where their converter is not installed, refused with the command that converts.

The conversions themselves run against the real libraries in the torch and verl nox sessions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.training import VLLM, CheckpointEvaluator, ConversionError, UnservableError, discover, parse_step
from evalsi.training._checkpoints import find_model
from evalsi.training._serving import check_servable, model_ref
from evalsi.training._sharded import find_sharded
from tests.training.conftest import write_spec


def touch(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def verl_fsdp(out: Path, step: int, world: int, ranks: range | None = None) -> Path:
    actor = out / f"global_step_{step}" / "actor"
    for rank in ranks if ranks is not None else range(world):
        for kind in ("model", "optim", "extra_state"):
            touch(actor / f"{kind}_world_size_{world}_rank_{rank}.pt")
    touch(actor / "fsdp_config.json", json.dumps({"FSDP_version": 2, "world_size": world}))
    touch(actor / "huggingface" / "config.json", "{}")
    touch(actor / "huggingface" / "tokenizer.json", "{}")
    touch(out / "latest_checkpointed_iteration.txt", str(step))
    return out / f"global_step_{step}"


def deepspeed(out: Path, step: int, *, latest: bool = True) -> Path:
    tag = out / f"global_step{step}"
    touch(tag / "mp_rank_00_model_states.pt")
    touch(tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    touch(tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    touch(out / "zero_to_fp32.py")
    if latest:
        touch(out / "latest", f"global_step{step}")
    return tag


def test_verl_fsdp_actors_hold_a_model_once_every_rank_is_saved(tmp_path: Path) -> None:
    half = verl_fsdp(tmp_path, 20, world=2, ranks=range(1))
    sharded = find_sharded(half)
    assert sharded is not None and sharded.format == "verl-fsdp" and not sharded.complete
    assert "1 of 2 FSDP shards" in sharded.found
    assert find_model(half) is None  # the watcher keeps waiting
    whole = verl_fsdp(tmp_path, 20, world=2)
    files = find_model(whole)
    assert files is not None and files.kind == "weights" and files.path == whole / "actor"
    assert files.sharded is not None and files.sharded.config == whole / "actor" / "huggingface"
    assert [c.step for c in discover(tmp_path)] == [20]


def test_deepspeed_tags_without_the_underscore_are_checkpoints_once_latest_names_them(tmp_path: Path) -> None:
    assert parse_step("global_step100") == 100 and parse_step("global_step_100") == 100
    tag = deepspeed(tmp_path, 100, latest=False)
    assert [c.step for c in discover(tmp_path)] == [100]
    sharded = find_sharded(tag)
    assert sharded is not None and sharded.format == "deepspeed" and not sharded.complete
    assert "latest does not name it yet" in sharded.found and find_model(tag) is None
    deepspeed(tmp_path, 200)  # latest now names global_step200: global_step100 was finished before it
    files = find_model(tag)
    assert files is not None and files.sharded is not None and files.sharded.tag == "global_step100"
    assert files.kind == "state-dict"  # no config.json beside it: weights without an architecture
    assert files.sharded.shards == tmp_path


def test_a_transformers_checkpoint_saved_under_deepspeed_zero3_is_converted_with_its_config(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint-40"
    deepspeed(checkpoint, 40)
    touch(checkpoint / "config.json", "{}")
    touch(checkpoint / "tokenizer.json", "{}")
    files = find_model(checkpoint)
    assert files is not None and files.kind == "weights" and files.sharded is not None
    assert files.sharded.tag == "global_step40" and files.sharded.config == checkpoint
    touch(checkpoint / "model.safetensors")  # saved with full weights too (ZeRO-2, or gathered 16-bit weights)
    plain = find_model(checkpoint)
    assert plain is not None and plain.sharded is None and plain.kind == "weights"


def test_torch_distributed_checkpoints_in_the_folder_or_a_sub_folder(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint-7"
    touch(checkpoint / "optimizer_0" / ".metadata")
    touch(checkpoint / "optimizer_0" / "__0_0.distcp")
    touch(checkpoint / "pytorch_model_fsdp_0" / "__0_0.distcp")
    touch(checkpoint / "pytorch_model_fsdp_0" / "__1_0.distcp")
    assert find_model(checkpoint) is None  # .metadata is written last
    touch(checkpoint / "pytorch_model_fsdp_0" / ".metadata")
    touch(checkpoint / "config.json", "{}")
    files = find_model(checkpoint)
    assert files is not None and files.sharded is not None and files.sharded.format == "dcp"
    assert files.path == checkpoint / "pytorch_model_fsdp_0" and files.kind == "weights"


def test_verl_megatron_is_refused_with_the_merge_command(tmp_path: Path) -> None:
    actor = tmp_path / "global_step_5" / "actor"
    touch(actor / "model" / "dist_ckpt" / "__0_0.distcp")
    touch(actor / "model" / "dist_ckpt" / ".metadata")
    touch(actor / "model" / "huggingface" / "config.json", "{}")
    with pytest.raises(ConversionError) as refused:
        model_ref(tmp_path / "global_step_5", 5, "run-1", convert_dir=tmp_path / "converted")
    message = str(refused.value)
    assert "is a verl Megatron checkpoint (Megatron shards in actor/model/dist_ckpt/)" in message
    assert f"python -m verl.model_merger merge --backend megatron --local_dir {actor} --target_dir " in message
    assert str(tmp_path / "converted" / "run-1" / "global_step_5-") in message


@pytest.mark.parametrize("tool", ["verl", "deepspeed", "torch"])
def test_without_the_converter_the_error_names_the_format_and_the_command(tmp_path: Path, tool: str) -> None:
    """The core environment has none of verl, DeepSpeed or torch: each format says what converts it."""
    if tool == "verl":
        checkpoint = verl_fsdp(tmp_path / "out", 3, world=2)
        expected = f"python -m verl.model_merger merge --backend fsdp --local_dir {checkpoint / 'actor'} --target_dir"
        found = "a verl FSDP checkpoint (2 of 2 FSDP shards (model_world_size_2_rank_*.pt) and huggingface/)"
    elif tool == "deepspeed":
        checkpoint = deepspeed(tmp_path / "out", 3)
        expected = f"python -m deepspeed.utils.zero_to_fp32 {tmp_path / 'out'} "
        found = "a DeepSpeed ZeRO checkpoint (1 *_model_states.pt and 2 *_optim_states.pt in global_step3/)"
    else:
        checkpoint = tmp_path / "out" / "step-3"
        touch(checkpoint / "__0_0.distcp")
        touch(checkpoint / ".metadata")
        expected = f"python -m torch.distributed.checkpoint.format_utils dcp_to_torch {checkpoint} "
        found = "a PyTorch distributed checkpoint (torch.distributed.checkpoint) (1 *.distcp files and .metadata)"
    with pytest.raises(ConversionError) as refused:
        model_ref(checkpoint, 3, "run", convert_dir=tmp_path / "converted")
    message = str(refused.value)
    assert found in message and f"needs {tool}, which is not installed here" in message and expected in message
    assert not any(p.name.endswith(".partial") for p in (tmp_path / "converted" / "run").iterdir())


def test_checkpoint_evaluations_convert_into_converted_of_their_log_directory(tmp_path: Path) -> None:
    checkpoint = verl_fsdp(tmp_path / "out", 3, world=1)
    evaluator = CheckpointEvaluator(write_spec(tmp_path / "specs"), "my run", log_dir=tmp_path / "logs")
    with pytest.raises(ConversionError) as refused:
        evaluator.evaluate(checkpoint, 3)
    assert f"--target_dir {tmp_path / 'logs' / 'converted' / 'my-run' / 'global_step_3-'}" in str(refused.value)
    options = ["--step", "3", "-f", str(tmp_path / "specs" / "forgetting.yaml"), "--training-run", "cli"]
    options += ["--log-dir", str(tmp_path / "cli-logs"), "-q"]
    said = CliRunner().invoke(app, ["checkpoints", "eval", str(checkpoint), *options], terminal_width=300)
    assert said.exit_code == 1 and "needs verl, which is not installed here" in said.output, said.output
    assert "python -m verl.model_merger merge --backend fsdp" in said.output
    assert not (tmp_path / "cli-logs" / "cli" / "forgetting").exists()  # nothing was generated


def test_a_sharded_checkpoint_still_being_written_is_refused_naming_what_is_there(tmp_path: Path) -> None:
    half = deepspeed(tmp_path / "out", 100, latest=False)
    with pytest.raises(UnservableError, match=r"is a DeepSpeed ZeRO checkpoint not complete yet: 1 \*_model_states"):
        check_servable(VLLM("/nonexistent/vllm"), model_ref(half, 100, "run", convert_dir=tmp_path / "converted"))
    ranks = verl_fsdp(tmp_path / "verl", 7, world=4, ranks=range(3))
    with pytest.raises(UnservableError, match=r"is a verl FSDP checkpoint not complete yet: 3 of 4 FSDP shards"):
        check_servable(VLLM("/nonexistent/vllm"), model_ref(ranks, 7, "run", convert_dir=tmp_path / "converted"))
    assert not (tmp_path / "converted").exists()  # nothing is converted before every shard is there
