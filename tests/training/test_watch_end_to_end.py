"""End to end: a training run writes checkpoints over time; `evalsi checkpoints watch` (a real process) evaluates
each one against the vLLM stand-in once it settles, finds the planted regression, writes the stop file, is
killed mid-evaluation and restarted without evaluating anything twice; then `curve` shows it and exits 3. The
same again with `--server` against a real evalsi server process: results stored there, the curve read back."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.runs import RunsClient
from tests.helpers.vllm_standin import read_log
from tests.training.conftest import RunningVLLM, answers, write_adapter, write_model, write_spec
from tests.training.watching import (
    PROMPT_TO_KEY,
    SETTLE,
    complete,
    completions,
    journal_keys,
    loads,
    served_models,
    wait_for,
    watcher,
)


@dataclass
class Store:
    """Where the steps' results go: the log directory alone, or also an evalsi server (``--server``)."""

    logs: Path
    server: str | None = None
    token: str = ""

    @property
    def options(self) -> list[str]:
        return ["--server", self.server] if self.server else []

    @property
    def env(self) -> dict[str, str]:
        return {"EVALSI_TOKEN": self.token} if self.server else {}

    def done(self, step: int) -> bool:
        """The step's results are complete where the watcher keeps them (on the server, with one)."""
        if self.server is None:
            return complete(self.logs / "grpo-1" / "forgetting" / f"step-{step}.json")
        with RunsClient(self.server, token=self.token) as client:
            run = client.latest_run({"training-run": "grpo-1", "training-step": str(step), "spec": "forgetting"})
        return run is not None and run["status"] == "complete"


@pytest.fixture(params=["embedded", "server"])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    if request.param == "embedded":
        return Store(tmp_path / "logs")
    url, token = request.getfixturevalue("server")
    monkeypatch.setenv("EVALSI_TOKEN", token)  # for the commands run in this process
    return Store(tmp_path / "logs", url, token)


def test_watch_evaluates_each_checkpoint_once_through_kill_and_restart(
    tmp_path: Path, slow_vllm: RunningVLLM, store: Store
) -> None:
    spec = write_spec(tmp_path / "specs")
    results = tmp_path / "logs" / "grpo-1" / "forgetting"
    cli = CliRunner()
    base = cli.invoke(
        app,
        [
            "checkpoints",
            "eval",
            "base",
            "--step",
            "base",
            "-f",
            str(spec),
            "--training-run",
            "grpo-1",
            "--serve",
            "lora",
            "--base-url",
            slow_vllm.base_url,
            "--log-dir",
            str(tmp_path / "logs"),
            "-q",
            "--set",
            "target.maxConcurrency=4",
            *store.options,
        ],
    )
    assert base.exit_code == 0, base.output
    out = tmp_path / "out"
    write_adapter(out / "checkpoint-100", answers(wrong=1))
    first = watcher(tmp_path, slow_vllm, spec, *store.options, env=store.env)
    try:
        # A half-written checkpoint (no adapter weights yet) must wait, whatever its age.
        half = out / "checkpoint-200"
        half.mkdir(parents=True)
        (half / "adapter_config.json").write_text(json.dumps({"r": 8}))
        (half / "answers.json").write_text(json.dumps(answers(wrong=5)))
        wait_for(lambda: store.done(100), what="step 100")
        time.sleep(SETTLE + 0.5)
        assert not (results / "step-200.json").exists() and not store.done(200)
        assert all(not name.startswith("grpo-1-step-200") for name, _ in loads(slow_vllm))
        (half / "adapter_model.safetensors").write_bytes(b"\0" * 64)
        finished_writing = time.time()
        wait_for(lambda: store.done(200), what="step 200")
        loaded_200 = next(t for name, t in loads(slow_vllm) if name.startswith("grpo-1-step-200"))
        assert loaded_200 - finished_writing >= SETTLE - 0.05  # the settle time was respected

        # The planted regression; the watcher is killed while it evaluates it.
        write_adapter(out / "checkpoint-300", answers(wrong=12))
        journal = results / "step-300.json.journal"
        wait_for(lambda: journal.exists() and len(journal.read_bytes().splitlines()) >= 6, what="step 300 underway")
        first.kill()
        first.wait(10)
        killed_at = time.time()
    finally:
        if first.poll() is None:
            first.kill()
    scored_before_kill = journal_keys(journal)
    assert 5 <= len(scored_before_kill) < 30
    assert not (tmp_path / "STOP").exists() and not store.done(300)

    second = watcher(tmp_path, slow_vllm, spec, *store.options, env=store.env)
    try:
        wait_for(lambda: store.done(300), what="step 300 after the restart")
        wait_for(lambda: (tmp_path / "STOP").exists(), what="the stop file")
    finally:
        second.send_signal(signal.SIGTERM)
        code = second.wait(20)
    assert code == 3, (tmp_path / "watcher.log").read_text()

    # The stand-in's requests, counted per checkpoint: nothing was asked twice.
    after = completions(slow_vllm, since=killed_at)
    assert all(model.startswith("grpo-1-step-300") for model, _, _ in after)  # 100 and 200 were not redone
    assert not {key for _, key, _ in after} & scored_before_kill  # nor were step 300's scored records
    every = completions(slow_vllm)
    for step in ("100", "200"):
        keys = [key for model, key, _ in every if model.startswith(f"grpo-1-step-{step}-")]
        assert sorted(keys) == sorted(PROMPT_TO_KEY.values()), step  # each record exactly once
    # Step 300: every record; asked twice are exactly those asked before the kill whose answers it lost (not yet
    # in the journal), and none more than twice.
    asked = Counter(key for model, key, _ in every if model.startswith("grpo-1-step-300-"))
    assert set(asked) == set(PROMPT_TO_KEY.values()) and max(asked.values()) <= 2
    asked_before_kill = {key for model, key, t in every if model.startswith("grpo-1-step-300-") and t < killed_at}
    assert {key for key, count in asked.items() if count > 1} == asked_before_kill - scored_before_kill
    stop = json.loads((tmp_path / "STOP").read_text())
    assert stop["step"] == 300 and stop["regressions"] == ["exact-match:0.2"]
    assert not any(name.startswith("grpo-1") for name in served_models(slow_vllm))  # every adapter unloaded

    where = ["--log-dir", str(tmp_path / "logs")]
    if store.server is not None:
        # One complete run per step on the server, nothing stored twice through the kill and the restart.
        with RunsClient(store.server, token=store.token) as client:
            stored = client.list_runs({"training-run": "grpo-1"})
        assert [r["labels"]["training-step"] for r in stored] == ["300", "200", "100", "base"]
        assert all(r["status"] == "complete" and r["recordCount"] == 30 for r in stored)
        shutil.rmtree(tmp_path / "logs")  # the curve comes from the server alone
        where = store.options
    plot = tmp_path / ("curve.png" if store.server else "curve.html")
    curve = cli.invoke(
        app,
        [
            "checkpoints",
            "curve",
            "-f",
            str(spec),
            "--training-run",
            "grpo-1",
            *where,
            "--regression",
            "exact-match:0.2",
            "--plot",
            str(plot),
        ],
    )
    assert curve.exit_code == 3, curve.output
    rows = [line.split() for line in curve.stdout.splitlines()]
    assert ["300", "0.600", "(-0.400!)", "regressed"] in rows and ["200", "0.833", "(-0.167*)", "ok"] in rows
    if plot.suffix == ".html":
        assert "class='regression'" in plot.read_text()
    else:
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000


def test_watch_once_with_vllm_serve_starts_and_stops_a_server_per_checkpoint(
    tmp_path: Path, vllm_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "standin.log"
    monkeypatch.setenv("VLLM_STANDIN_LOG", str(log))
    spec = write_spec(tmp_path / "specs")
    out = tmp_path / "out"
    write_model(out / "global_step_10", answers())
    write_model(out / "global_step_20", answers(wrong=2))
    write_model(out / "global_step_30", weights=False)  # never finished: reported, not waited for
    old = time.time() - 60
    for path in out.rglob("*"):
        os.utime(path, (old, old))
    result = CliRunner().invoke(
        app,
        [
            "checkpoints",
            "watch",
            str(out),
            "-f",
            str(spec),
            "--training-run",
            "v",
            "--serve",
            "vllm",
            "--vllm-bin",
            str(vllm_bin),
            "--log-dir",
            str(tmp_path / "logs"),
            "--settle",
            "5",
            "--once",
            "-q",
        ],
    )
    assert result.exit_code == 1, result.output  # step 30 holds no model
    starts = [e for e in read_log(log) if e["event"] == "start"]
    assert [e["argv"][1] for e in starts] == [str(out / "global_step_10"), str(out / "global_step_20")]
    stops = {e["pid"] for e in read_log(log) if e["event"] == "stop"}
    assert {e["pid"] for e in starts} == stops
    for pid in stops:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    files = sorted(p.name for p in (tmp_path / "logs" / "v" / "forgetting").iterdir())
    assert files == ["step-10.json", "step-20.json"]
