"""Checkpoint results on a real evalsi server process: `checkpoints eval | watch | curve --server` and
`CheckpointEvaluator(server=...)` against the vLLM stand-in; the server's curve is the step files' curve."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.runs import RunsClient
from evalsi.training import CheckpointEvaluator, LoRA
from tests.helpers.vllm_standin import read_log
from tests.training.conftest import QUESTIONS, RunningVLLM, answers, lora_arguments, write_adapter, write_spec

ROOT = Path(__file__).resolve().parents[2]
PROMPT_TO_KEY = {q: f"r{i}" for i, q in enumerate(QUESTIONS)}


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["checkpoints", *args])


def watch(tmp_path: Path, vllm: RunningVLLM, spec: Path, logs: Path, token: str, *extra: str) -> tuple[int, str]:
    """`evalsi checkpoints watch --once` as its own process; its exit code and output."""
    args = [
        sys.executable,
        "-m",
        "evalsi",
        "checkpoints",
        "watch",
        str(tmp_path / "out"),
        *lora_arguments(spec, logs, vllm.base_url),
        "--settle",
        "0.2",
        "--poll",
        "0.1",
        "--once",
        "-q",
        *extra,
    ]
    env = {**os.environ, "EVALSI_TOKEN": token, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, timeout=300)
    return done.returncode, (done.stdout + done.stderr).decode()


def completions(vllm: RunningVLLM, since: float) -> list[tuple[str, str]]:
    out = []
    for event in read_log(vllm.log):
        if event.get("path") == "/v1/chat/completions" and event["time"] >= since:
            out.append((event["body"]["model"], PROMPT_TO_KEY[event["body"]["messages"][-1]["content"]]))
    return out


def adapter(tmp_path: Path, step: int, wrong: int) -> Path:
    folder = write_adapter(tmp_path / "out" / f"checkpoint-{step}", answers(wrong))
    old = time.time() - 60
    for path in (folder, *folder.iterdir()):
        os.utime(path, (old, old))
    return folder


def without_paths(curves: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for curve in curves:
        for point in curve["points"]:
            point.pop("path")
    return curves


def test_watch_with_server_stores_each_step_and_the_server_curve_is_the_embedded_one(
    tmp_path: Path, lora_vllm: RunningVLLM, server: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, token = server
    monkeypatch.setenv("EVALSI_TOKEN", token)
    spec = write_spec(tmp_path / "specs")
    logs = tmp_path / "logs"
    base = cli("eval", "base", "--step", "base", *lora_arguments(spec, logs, lora_vllm.base_url), "-q", "--server", url)
    assert base.exit_code == 0, base.output
    adapter(tmp_path, 100, 1)
    adapter(tmp_path, 200, 5)
    code, output = watch(tmp_path, lora_vllm, spec, logs, token, "--server", url, "--regression", "exact-match:0.2")
    assert code == 0, output

    client = RunsClient(url, token=token)
    stored = client.list_runs({"training-run": "grpo-1"})
    assert [r["labels"]["training-step"] for r in stored] == ["200", "100", "base"]  # newest first
    assert all(r["labels"]["spec"] == "forgetting" and r["status"] == "complete" for r in stored)
    assert [r["recordCount"] for r in stored] == [30, 30, 30]

    # A fresh machine: no local results at all. The server says what is done; only step 300 is evaluated,
    # and its comparison with the base (stored on the server only) is the server's.
    shutil.rmtree(logs)
    adapter(tmp_path, 300, 12)
    since = time.time()
    stop = tmp_path / "STOP"
    code, output = watch(
        tmp_path,
        lora_vllm,
        spec,
        logs,
        token,
        "--server",
        url,
        "--regression",
        "exact-match:0.2",
        "--stop-file",
        str(stop),
    )
    assert code == 3, output
    after = completions(lora_vllm, since)
    assert after and all(model.startswith("grpo-1-step-300") for model, _ in after)
    assert sorted(key for _, key in after) == sorted(PROMPT_TO_KEY.values())  # each record once
    assert json.loads(stop.read_text())["regressions"] == ["exact-match:0.2"]
    assert sorted(p.name for p in (logs / "grpo-1" / "forgetting").iterdir()) == ["step-300.json"]

    served = cli(
        "curve",
        "-f",
        str(spec),
        "--training-run",
        "grpo-1",
        "--regression",
        "exact-match:0.2",
        "--json",
        "--server",
        url,
    )
    assert served.exit_code == 3, served.output
    table = cli(
        "curve", "-f", str(spec), "--training-run", "grpo-1", "--regression", "exact-match:0.2", "--server", url
    )
    rows = [line.split() for line in table.stdout.splitlines()]
    assert ["300", "0.600", "(-0.400!)", "regressed"] in rows and ["200", "0.833", "(-0.167*)", "ok"] in rows

    # The same steps evaluated without a server give the same curve.
    embedded_logs = tmp_path / "embedded"
    monkeypatch.delenv("EVALSI_TOKEN")
    base = cli("eval", "base", "--step", "base", *lora_arguments(spec, embedded_logs, lora_vllm.base_url), "-q")
    assert base.exit_code == 0, base.output
    assert watch(tmp_path, lora_vllm, spec, embedded_logs, "", "--regression", "exact-match:0.2")[0] == 3
    embedded = cli(
        "curve",
        "-f",
        str(spec),
        "--training-run",
        "grpo-1",
        "--log-dir",
        str(embedded_logs),
        "--regression",
        "exact-match:0.2",
        "--json",
    )
    assert embedded.exit_code == 3, embedded.output
    from_server = orjson.loads(served.stdout)
    assert from_server[0]["points"][1]["path"] == f"{url}/v1alpha1/runs/{stored[1]['id']}"
    assert without_paths(from_server) == without_paths(orjson.loads(embedded.stdout))
    client.close()


def test_checkpoint_evaluator_with_server_compares_on_the_server(
    tmp_path: Path, lora_vllm: RunningVLLM, server: tuple[str, str]
) -> None:
    url, token = server
    spec = write_spec(tmp_path / "specs")
    results = {}
    for name, where in (("embedded", None), ("server", url)):
        evaluator = CheckpointEvaluator(
            spec,
            f"loop-{name}",
            LoRA(lora_vllm.base_url),
            regression=["exact-match:0.2"],
            log_dir=tmp_path / name,
            server=where,
            token=token,
        )
        evaluator.evaluate("base", None)
        assert evaluator.is_done(None) and not evaluator.is_done(300)
        results[name] = evaluator.evaluate(adapter(tmp_path, 300, 12), 300)
        assert evaluator.is_done(300)
    on_server, embedded = results["server"], results["embedded"]
    assert on_server.regressed and on_server.status == "regressed" and embedded.status == "regressed"
    run_id = on_server.specs[0].run_id
    assert run_id is not None and embedded.specs[0].run_id is None
    assert on_server.specs[0].comparisons["exact-match"] == embedded.specs[0].comparisons["exact-match"]
    assert on_server.specs[0].comparisons["exact-match"].difference.mean == pytest.approx(-0.4)
    assert on_server.log_metrics() == {"eval/forgetting/exact-match": pytest.approx(0.6)}
    with RunsClient(url, token=token) as client:
        run = client.get_run(run_id)
    assert run["labels"] == {"training-run": "loop-server", "training-step": "300", "spec": "forgetting"}
    assert run["details"]["checkpoint"]["step"] == 300

    # Another machine (no local results) finds the step done on the server, with its metrics for the trainer's log.
    elsewhere = CheckpointEvaluator(
        spec,
        "loop-server",
        LoRA(lora_vllm.base_url),
        regression=["exact-match:0.2"],
        log_dir=tmp_path / "other",
        server=url,
        token=token,
    )
    assert elsewhere.is_done(300)
    again = elsewhere.evaluate(tmp_path / "out" / "checkpoint-300", 300)
    assert again.specs[0].reused and not (tmp_path / "other").exists()
    assert again.regressed and again.specs[0].run_id == run_id
    assert again.log_metrics() == {"eval/forgetting/exact-match": pytest.approx(0.6)}


def test_server_refusing_the_token_fails_the_command_clearly(
    tmp_path: Path, lora_vllm: RunningVLLM, server: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = server
    monkeypatch.setenv("EVALSI_TOKEN", "evalsi_not-a-token")
    spec = write_spec(tmp_path / "specs")
    result = cli("curve", "-f", str(spec), "--training-run", "grpo-1", "--server", url)
    assert result.exit_code == 1 and "EVALSI_TOKEN" in result.output
    evaluated = cli(
        "eval",
        "base",
        "--step",
        "base",
        *lora_arguments(spec, tmp_path / "logs", lora_vllm.base_url),
        "-q",
        "--server",
        url,
    )
    assert evaluated.exit_code == 1 and "401" in evaluated.output
