"""Remote checkpoint locations through fsspec (its memory and local filesystems), and local directories."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.training import CheckpointEvaluator, Endpoint
from evalsi.training._checkpoints import SettleTracker, Signature
from evalsi.training._sources import LocalDirectory, RemoteDirectory, SourceError, open_source
from evalsi.training._watch import Watcher
from tests.helpers.openai_server import OpenAIServer
from tests.training.conftest import answers, write_model, write_spec


@pytest.fixture
def bucket() -> Iterator[str]:
    """A fresh folder on fsspec's in-memory filesystem, as a URL."""
    root = f"memory://bucket-{uuid.uuid4().hex[:8]}/run/out"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root.removeprefix("memory://")):
        fs.rm(root.removeprefix("memory://"), recursive=True)


def put(url: str, files: dict[str, bytes]) -> None:
    fs = fsspec.filesystem("memory")
    for rel, data in files.items():
        fs.pipe(f"{url.removeprefix('memory://')}/{rel}", data)


def adapter_files(step: int, wrong: int = 0) -> dict[str, bytes]:
    return {
        f"checkpoint-{step}/adapter_config.json": b"{}",
        f"checkpoint-{step}/adapter_model.safetensors": b"\0" * 32,
        f"checkpoint-{step}/answers.json": json.dumps(answers(wrong)).encode(),
    }


def test_remote_discovery_models_and_download(bucket: str, tmp_path: Path) -> None:
    put(
        bucket,
        {
            **adapter_files(100),
            "checkpoint-200/adapter_config.json": b"{}",
            "step-300.pt": b"torch",
            "notes.txt": b"x",
            "global_step_400/actor/huggingface/config.json": b"{}",
            "global_step_400/actor/huggingface/model.safetensors": b"w",
        },
    )
    source = RemoteDirectory(bucket, tmp_path / "cache")
    found = source.discover()
    assert [c.step for c in found] == [100, 200, 300, 400]
    kinds = [(m.kind if (m := source.find_model(c)) else None) for c in found]
    assert kinds == ["lora", None, "state-dict", "weights"]
    assert source.find_model(found[3]).path.name == "huggingface"  # type: ignore[union-attr]
    sig = source.signature(found[0].path)
    assert [name for name, _, _ in sig.files] == ["adapter_config.json", "adapter_model.safetensors", "answers.json"]
    assert sig.newest > 0
    local = source.fetch(found[0])
    assert sorted(p.name for p in local.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "answers.json",
    ]
    assert source.fetch(found[0]) == local  # downloaded once per version of its files
    single = source.fetch(found[2])
    assert single.name == "step-300.pt" and single.read_bytes() == b"torch"
    put(bucket, {"checkpoint-100/adapter_model.safetensors": b"\1" * 40})  # rewritten: a new download
    assert source.fetch(found[0]) != local
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")]  # no partial downloads left


def test_local_filesystem_through_fsspec_reads_a_sharded_index(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "out" / "checkpoint-7", weights=False)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-1.safetensors"}}))
    source = RemoteDirectory(f"file://{tmp_path / 'out'}", tmp_path / "cache")
    [checkpoint] = source.discover()
    assert source.find_model(checkpoint) is None  # the shard the index names is missing
    (folder / "model-1.safetensors").write_bytes(b"w")
    assert source.find_model(checkpoint).kind == "weights"  # type: ignore[union-attr]
    assert isinstance(open_source(str(tmp_path), tmp_path), LocalDirectory)
    assert isinstance(open_source(f"file://{tmp_path}", tmp_path), LocalDirectory)


def test_a_store_without_times_waits_from_first_sight() -> None:
    clock = [100.0]
    tracker = SettleTracker(5.0, lambda: clock[0], lambda path: Signature((("a", 1, 0),)))
    assert not tracker.settled(Path("x"))
    clock[0] = 105.0
    assert tracker.settled(Path("x"))


def test_watch_evaluates_remote_checkpoints(bucket: str, tmp_path: Path) -> None:
    put(bucket, {**adapter_files(100), **adapter_files(200)})
    spec = write_spec(tmp_path / "specs")
    with OpenAIServer(answers=answers(), default="?") as server:
        evaluator = CheckpointEvaluator(spec, "remote", Endpoint(server.base_url, "m"), log_dir=tmp_path / "logs")
        clock = [1e12]  # far in the future: everything has settled
        watcher = Watcher(
            evaluator,
            RemoteDirectory(bucket, tmp_path / "cache"),
            settle=1.0,
            once=True,
            clock=lambda: clock[0],
            sleep=lambda s: None,
        )
        report = watcher.run()
    assert [c.step for c, _ in report.evaluated] == [100, 200] and not report.failed
    meta = json.loads((tmp_path / "logs" / "remote" / "forgetting" / "step-200.json").read_text())["checkpoint"]
    assert meta["location"].startswith(str((tmp_path / "cache").resolve())) and meta["kind"] == "lora"


def test_cli_eval_downloads_a_remote_checkpoint(bucket: str, tmp_path: Path) -> None:
    put(bucket, adapter_files(100))
    spec = write_spec(tmp_path / "specs")
    with OpenAIServer(answers=answers(), default="?") as server:
        result = CliRunner().invoke(
            app,
            [
                "checkpoints",
                "eval",
                f"{bucket}/checkpoint-100",
                "--step",
                "100",
                "-f",
                str(spec),
                "--training-run",
                "r",
                "--serve",
                "endpoint",
                "--base-url",
                server.base_url,
                "--model",
                "m",
                "--log-dir",
                str(tmp_path / "logs"),
                "-q",
            ],
        )
        assert result.exit_code == 0, result.output
        missing = CliRunner().invoke(
            app,
            [
                "checkpoints",
                "eval",
                f"{bucket}/checkpoint-900",
                "--step",
                "900",
                "-f",
                str(spec),
                "--training-run",
                "r",
                "--serve",
                "endpoint",
                "--base-url",
                server.base_url,
                "--log-dir",
                str(tmp_path / "logs"),
                "-q",
            ],
        )
    assert missing.exit_code == 2 and "no checkpoint named 'checkpoint-900'" in missing.output
    assert [p.name[:15] for p in (tmp_path / "logs" / "downloads" / "r").iterdir()] == ["checkpoint-100-"]


def test_remote_without_fsspec_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fsspec.core", None)
    with pytest.raises(SourceError, match=r"pip install 'evalsi\[remote\]'"):
        RemoteDirectory("s3://bucket/out", tmp_path)
