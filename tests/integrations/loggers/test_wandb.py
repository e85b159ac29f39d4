"""``loggers: {wandb: {mode: offline}}`` and ``--log-to wandb``: W&B's own client writes offline runs, which are
read back record by record (the run's transaction log, parsed with W&B's own protobuf classes): the metrics with
``eval/step`` at the checkpoint's step, the per-record table, an ``evaluation`` artifact referencing the results
file; every step of a training run resumes the same run."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from wandb.proto import wandb_internal_pb2

from evalsi.runs._log_wandb import run_id
from tests.helpers.openai_server import OpenAIServer
from tests.integrations.loggers.conftest import add_loggers, endpoint, invoke, settled
from tests.training.conftest import answers, write_spec

BLOCK = 32768
HEADER = struct.Struct("<IHB")  # checksum, length, type: the records of W&B's transaction log (LevelDB's log format)


def records(path: Path) -> Iterator[Any]:
    """Every record of a ``run-<id>.wandb`` file."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:8]
    pos, pending = 7, b""
    while pos + HEADER.size <= len(data):
        if BLOCK - pos % BLOCK < HEADER.size:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = HEADER.unpack_from(data, pos)
        chunk = data[pos + HEADER.size : pos + HEADER.size + length]
        pos += HEADER.size + length
        if kind == 0:
            break
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):  # a whole record, or the last part of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def history(run_files: list[Path]) -> list[dict[str, Any]]:
    """Every history entry of the runs, in order, as key -> value."""
    entries = []
    for path in run_files:
        for record in records(path):
            if record.WhichOneof("record_type") == "history":
                entries.append(
                    {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
                )
    return entries


def artifacts(run_files: list[Path]) -> list[Any]:
    return [r.artifact for path in run_files for r in records(path) if r.WhichOneof("record_type") == "artifact"]


def offline_runs(folder: Path, bound: float = 120.0) -> list[Path]:
    """The transaction logs of the offline runs under a W&B dir, oldest first, once each holds its exit record.

    W&B's service process may still be writing a log when ``run.finish()`` has returned: read at once, a log can
    stop short of its history. After ``bound`` seconds the logs are returned as they are, and the assertions that
    follow say what is missing.
    """
    deadline = time.monotonic() + bound
    while True:
        runs = sorted(folder.glob("wandb/offline-run-*/run-*.wandb"), key=lambda p: p.parent.name)
        if (runs and all(map(_finished, runs))) or time.monotonic() > deadline:
            return runs
        time.sleep(0.1)


def _finished(path: Path) -> bool:
    """Whether a run's transaction log holds its exit record (the last one ``run.finish()`` sends)."""
    try:
        return any(record.WhichOneof("record_type") == "exit" for record in records(path))
    except (AssertionError, OSError, DecodeError):  # not even its header yet, or a record half written
        return False


@pytest.fixture(autouse=True)
def no_account(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No W&B account or settings of the machine's: everything stays in the test's folder."""
    for name in ("WANDB_API_KEY", "WANDB_ENTITY", "WANDB_PROJECT", "WANDB_DIR", "WANDB_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))


def test_evalsi_run_logs_an_offline_run(server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server.answers = answers(wrong=6)  # type: ignore[assignment]
    spec = add_loggers(write_spec(tmp_path / "specs"), {"wandb": {"mode": "offline", "dir": "wb", "project": "p"}})
    monkeypatch.chdir(tmp_path)
    result = invoke("run", "-f", str(spec), "--set", f"target.baseUrl={server.base_url}", "--set",
                    "target.model=m", "-o", "out.json", "-q")  # fmt: skip
    assert result.exit_code == 0, result.output
    runs = offline_runs(tmp_path / "specs" / "wb")
    assert [p.name for p in runs] == [f"run-{run_id('p', 'forgetting')}.wandb"]
    entries = [e for e in history(runs) if "eval/step" in e]
    assert len(entries) == 1, [r.WhichOneof("record_type") for r in records(runs[0])]  # what the log holds
    entry = entries[0]
    assert entry["eval/step"] == 0
    assert entry["eval/forgetting/exact-match"] == pytest.approx(0.8)
    assert entry["eval/forgetting/exact-match/ci_low"] < 0.8 < entry["eval/forgetting/exact-match/ci_high"]
    assert entry["eval/forgetting/records/_type"] == "table-file" and entry["eval/forgetting/records/nrows"] == 30
    table = json.loads((runs[0].parent / "files" / entry["eval/forgetting/records/path"]).read_text())
    assert table["columns"] == ["key", "id", "prompt", "reference", "completion", "exact-match"]
    assert len(table["data"]) == 30 and sum(row[-1] for row in table["data"]) == 24
    [artifact] = [a for a in artifacts(runs) if a.type == "evaluation"]
    assert artifact.type == "evaluation" and artifact.name == "forgetting-forgetting-step-0"
    refs = {entry.path: entry.ref for entry in artifact.manifest.contents}
    assert refs["results.json"] == (tmp_path / "out.json").as_uri()
    assert "records.table.json" in refs


def test_each_checkpoint_resumes_the_training_runs_run_at_its_step(server: OpenAIServer, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "specs")
    logs = tmp_path / "logs"
    offline = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path / "wb"), "WANDB_PROJECT": "grpo"}
    with pytest.MonkeyPatch.context() as env:
        for name, value in offline.items():
            env.setenv(name, value)
        wandb = ("--log-to", "wandb")
        base = invoke("checkpoints", "eval", "base-model", "--step", "base", *endpoint(spec, logs, server, *wandb))
        assert base.exit_code == 0, base.output
        server.answers = answers(wrong=3)  # type: ignore[assignment]
        settled(tmp_path / "out" / "checkpoint-10")
        settled(tmp_path / "out" / "checkpoint-20")
        watched = invoke("checkpoints", "watch", str(tmp_path / "out"),
                         *endpoint(spec, logs, server, *wandb), "--once")  # fmt: skip
        assert watched.exit_code == 0, watched.output
    runs = offline_runs(tmp_path / "wb")
    assert {p.name for p in runs} == {f"run-{run_id('grpo', 'r')}.wandb"}  # one run, resumed at each step
    entries = [e for e in history(runs) if "eval/step" in e]
    assert [(e["eval/step"], e["eval/forgetting/exact-match"]) for e in entries] == [(0, 1.0), (10, 0.9), (20, 0.9)]
    names = sorted(a.name for a in artifacts(runs) if a.type == "evaluation")
    assert names == ["r-forgetting-step-0", "r-forgetting-step-10", "r-forgetting-step-20"]
