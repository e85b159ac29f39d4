"""`checkpoints eval` and `watch` agree: 1 failed work, 2 bad usage or input, 3 a gate or a regression; and a
checkpoint the chosen `--serve` cannot serve gets advice that works for what it holds."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from tests.training.conftest import write_adapter, write_model, write_spec


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["checkpoints", *args], terminal_width=200)


def said(result: Any) -> str:
    return " ".join(result.output.split())


def common(tmp_path: Path, serve: str, *extra: str) -> list[str]:
    spec = write_spec(tmp_path / "specs")
    return ["-f", str(spec), "--training-run", "r", "--serve", serve, "--log-dir", str(tmp_path / "logs"), "-q",
            *extra]  # fmt: skip


def settle(path: Path) -> Path:
    for item in (path, *(path.iterdir() if path.is_dir() else ())):
        os.utime(item, (1, 1))
    return path


def state_dict(folder: Path, step: int) -> Path:
    """A settled ``step-N.pt`` state dictionary file in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step-{step}.pt"
    path.write_bytes(b"\0" * 16)
    return settle(path)


LORA = ("lora", "--base-url", "http://127.0.0.1:9/v1")


def test_a_location_that_cannot_be_opened_exits_2_from_eval_and_watch(tmp_path: Path) -> None:
    one = cli("eval", "nosuchprotocol://bucket/out/checkpoint-1", "--step", "1", *common(tmp_path, *LORA))
    every = cli("watch", "nosuchprotocol://bucket/out", *common(tmp_path, *LORA), "--once")
    assert (one.exit_code, every.exit_code) == (2, 2), one.output + every.output
    assert "cannot open this location" in said(one) and "cannot open this location" in said(every)
    assert "Traceback" not in one.output + every.output


@pytest.mark.parametrize("serve", [LORA, ("vllm", "--vllm-bin", "/nonexistent/vllm")])
def test_a_state_dictionary_gets_advice_that_serves_it(tmp_path: Path, serve: tuple[str, ...]) -> None:
    out = tmp_path / "out"
    one = cli("eval", str(state_dict(out, 10)), "--step", "10", *common(tmp_path, *serve))
    every = cli("watch", str(out), *common(tmp_path, *serve), "--once", "--settle", "1")
    assert (one.exit_code, every.exit_code) == (2, 2), one.output + every.output
    for result in (one, every):
        assert "holds a state dictionary, which --serve " in said(result)
        assert "serve it with --serve transformers --base-model MODEL" in said(result)
        assert "use --serve vllm" not in said(result)
    assert not (tmp_path / "logs" / "r").exists()  # nothing was served or evaluated


def test_what_each_kind_needs_is_said_before_anything_is_served(tmp_path: Path) -> None:
    adapter = write_adapter(tmp_path / "checkpoint-1")
    vllm = cli("eval", str(adapter), "--step", "1", *common(tmp_path, "vllm", "--vllm-bin", "/nonexistent/vllm"))
    assert vllm.exit_code == 2 and "--serve lora" in said(vllm), vllm.output
    weights = write_model(tmp_path / "checkpoint-2")
    lora = cli("eval", str(weights), "--step", "2", *common(tmp_path, *LORA))
    assert lora.exit_code == 2 and "--serve vllm or --serve transformers" in said(lora), lora.output
    pt = state_dict(tmp_path / "sd", 3)
    transformers = cli("eval", str(pt), "--step", "3", *common(tmp_path, "transformers"))
    assert transformers.exit_code == 2 and "give --base-model MODEL" in said(transformers), transformers.output
    empty = tmp_path / "checkpoint-4"
    empty.mkdir()
    nothing = cli("eval", str(empty), "--step", "4", *common(tmp_path, "vllm", "--vllm-bin", "/nonexistent/vllm"))
    assert nothing.exit_code == 2 and "holds no model" in said(nothing), nothing.output
    missing = cli("eval", "ckpts/checkpoint-5", "--step", "5", *common(tmp_path, *LORA))
    assert missing.exit_code == 2 and "ckpts/checkpoint-5: no such file or directory" in said(missing)


def test_a_spec_whose_dataset_is_missing_exits_2_from_eval_and_watch(tmp_path: Path) -> None:
    args = common(tmp_path, "endpoint", "--base-url", "http://127.0.0.1:9/v1", "--model", "m")
    (tmp_path / "specs" / "forgetting.jsonl").unlink()
    settle(write_model(tmp_path / "out" / "checkpoint-1"))
    one = cli("eval", str(tmp_path / "out" / "checkpoint-1"), "--step", "1", *args)
    every = cli("watch", str(tmp_path / "out"), *args, "--once", "--settle", "1")
    assert (one.exit_code, every.exit_code) == (2, 2), one.output + every.output
    assert "forgetting.jsonl" in said(one) and "forgetting.jsonl" in said(every)


def test_an_option_the_serving_strategy_would_ignore_is_refused(tmp_path: Path) -> None:
    checkpoint = str(write_model(tmp_path / "checkpoint-1"))
    vllm = cli("eval", checkpoint, "--step", "1", *common(tmp_path, "vllm", "--base-url", "http://127.0.0.1:9/v1"))
    assert vllm.exit_code == 2
    assert "--base-url does not apply to --serve vllm (it is for --serve lora and --serve endpoint)" in said(vllm)
    lora = cli("watch", str(tmp_path), *common(tmp_path, *LORA, "--base-model", "org/base"), "--once")
    assert lora.exit_code == 2 and "--base-model does not apply to --serve lora" in said(lora), lora.output


def test_watch_once_on_a_directory_that_is_not_there_exits_2(tmp_path: Path) -> None:
    result = cli("watch", "outt", *common(tmp_path, *LORA), "--once")
    assert result.exit_code == 2 and "outt: no such directory" in said(result), result.output
