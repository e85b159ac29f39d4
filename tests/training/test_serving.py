"""Serving strategies against the vLLM stand-in (a real process speaking vLLM's CLI and HTTP API)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from evalsi.training import VLLM, Endpoint, LoRA, ModelRef, ServingError, ServingStrategy, UnservableError
from evalsi.training._serving import api_root, model_ref
from evalsi.training._vllm import stop_process
from tests.helpers.vllm_standin import read_log
from tests.training.conftest import RunningVLLM, start_standin, write_adapter, write_model


def chat(base_url: str, model: str, prompt: str) -> httpx.Response:
    return httpx.post(
        f"{base_url}/chat/completions",
        timeout=10,
        json={"model": model, "messages": [{"role": "user", "content": prompt}]},
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_strategies_satisfy_the_protocol(tmp_path: Path) -> None:
    for strategy in (Endpoint(), LoRA("http://x/v1"), VLLM()):
        assert isinstance(strategy, ServingStrategy)
    assert api_root("http://h:8000/v1/") == "http://h:8000" and api_root("http://h:8000") == "http://h:8000"


def test_served_names_are_unique_to_the_files(tmp_path: Path) -> None:
    folder = write_adapter(tmp_path / "checkpoint-100")
    first = model_ref(folder, 100, "grpo 1")
    assert first.served_name.startswith("grpo-1-step-100-")
    assert model_ref(folder, 100, "grpo 1").served_name == first.served_name  # same files, same name
    (folder / "adapter_model.safetensors").write_bytes(b"\1" * 65)
    assert model_ref(folder, 100, "grpo 1").served_name != first.served_name
    base = model_ref("Qwen/Qwen3-8B", None, "grpo-1")
    assert base.files is None and base.label == "base" and base.served_name == "grpo-1-base"


def test_endpoint_serves_a_base_by_name_and_checkpoints_as_configured(tmp_path: Path) -> None:
    with Endpoint("http://h:1/v1/").serve(model_ref("org/base", None, "r")) as served:
        assert served.base_url == "http://h:1/v1" and served.model == "org/base"
    ckpt = write_model(tmp_path / "checkpoint-1")
    with Endpoint().serve(model_ref(ckpt, 1, "r")) as served:
        assert served.base_url is None and served.model is None  # the spec's own target
    with Endpoint(model="m").serve(model_ref(ckpt, 1, "r")) as served:
        assert served.model == "m"


def test_lora_loads_a_unique_adapter_answers_through_it_and_unloads(tmp_path: Path, lora_vllm: RunningVLLM) -> None:
    adapter = write_adapter(tmp_path / "checkpoint-100", {"2+2?": "4"})
    ref = model_ref(adapter, 100, "grpo-1")
    strategy = LoRA(lora_vllm.base_url)
    with strategy.serve(ref) as served:
        assert served.model == ref.served_name and served.base_url == lora_vllm.base_url
        models = httpx.get(f"{lora_vllm.base_url}/models").json()["data"]
        assert {m["id"] for m in models} == {"base", ref.served_name}
        assert chat(lora_vllm.base_url, served.model, "2+2?").json()["choices"][0]["message"]["content"] == "4"
    assert [m["id"] for m in httpx.get(f"{lora_vllm.base_url}/models").json()["data"]] == ["base"]
    paths = [e.get("path") for e in read_log(lora_vllm.log) if e["event"] == "request"]
    assert "/v1/load_lora_adapter" in paths and "/v1/unload_lora_adapter" in paths
    loads = [e["body"] for e in read_log(lora_vllm.log) if e.get("path") == "/v1/load_lora_adapter"]
    assert loads == [{"lora_name": ref.served_name, "lora_path": str(adapter.resolve())}]


def test_lora_base_step_uses_the_served_base_model(lora_vllm: RunningVLLM) -> None:
    with LoRA(lora_vllm.base_url).serve(model_ref("base", None, "r")) as served:
        assert served.model == "base"
        assert chat(lora_vllm.base_url, "base", "2+2?").json()["choices"][0]["message"]["content"] == "5"


def test_lora_unloads_after_an_error_in_the_evaluation(tmp_path: Path, lora_vllm: RunningVLLM) -> None:
    ref = model_ref(write_adapter(tmp_path / "checkpoint-1"), 1, "r")
    with pytest.raises(RuntimeError, match="boom"), LoRA(lora_vllm.base_url).serve(ref):
        raise RuntimeError("boom")
    assert [m["id"] for m in httpx.get(f"{lora_vllm.base_url}/models").json()["data"]] == ["base"]


def test_lora_reuses_an_adapter_left_loaded_under_its_name(tmp_path: Path, lora_vllm: RunningVLLM) -> None:
    ref = model_ref(write_adapter(tmp_path / "checkpoint-1", {"*": "hi"}), 1, "r")
    body = {"lora_name": ref.served_name, "lora_path": ref.location}
    assert httpx.post(f"http://127.0.0.1:{lora_vllm.port}/v1/load_lora_adapter", json=body).status_code == 200
    with LoRA(lora_vllm.base_url).serve(ref) as served:  # a watcher killed mid-evaluation left it loaded
        assert chat(lora_vllm.base_url, served.model or "", "x").json()["choices"][0]["message"]["content"] == "hi"


def test_lora_errors_name_the_server_and_the_cause(tmp_path: Path, lora_vllm: RunningVLLM, vllm_bin: Path) -> None:
    full = model_ref(write_model(tmp_path / "checkpoint-1"), 1, "r")
    with (
        pytest.raises(
            UnservableError, match=r"holds full weights, not a LoRA adapter; .*--serve vllm or --serve trans"
        ),
        LoRA(lora_vllm.base_url).serve(full),
    ):
        pass
    bogus = ModelRef(str(tmp_path / "gone"), 2, "r", None, "f")
    with pytest.raises(UnservableError, match="holds no LoRA adapter"), LoRA(lora_vllm.base_url).serve(bogus):
        pass
    adapter = write_adapter(tmp_path / "checkpoint-3")
    ref = model_ref(adapter, 3, "r")
    (adapter / "adapter_config.json").unlink()  # deleted between discovery and loading
    with (
        pytest.raises(ServingError, match=r"HTTP 400: Loading lora .* failed: No adapter found"),
        LoRA(lora_vllm.base_url).serve(ref),
    ):
        pass
    with (
        pytest.raises(ServingError, match="cannot reach vLLM"),
        LoRA("http://127.0.0.1:9/v1").serve(model_ref(write_adapter(tmp_path / "checkpoint-4"), 4, "r")),
    ):
        pass


def test_lora_without_runtime_updates_says_how_to_start_vllm(tmp_path: Path, vllm_bin: Path) -> None:
    running = start_standin(vllm_bin, write_model(tmp_path / "base"), tmp_path / "log", lora=False)
    try:
        ref = model_ref(write_adapter(tmp_path / "checkpoint-1"), 1, "r")
        with (
            pytest.raises(ServingError, match=r"HTTP 404.*VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"),
            LoRA(running.base_url).serve(ref),
        ):
            pass
    finally:
        stop_process(running.process, 5)


def test_vllm_starts_serves_and_stops_the_checkpoint(
    tmp_path: Path, vllm_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "standin.log"
    monkeypatch.setenv("VLLM_STANDIN_LOG", str(log))
    monkeypatch.setenv("VLLM_STANDIN_STARTUP", "0.3")  # health must be waited for
    ref = model_ref(write_model(tmp_path / "checkpoint-200", {"2+2?": "4"}), 200, "grpo-1")
    strategy = VLLM(str(vllm_bin), ["--max-model-len", "2048"], log_dir=tmp_path / "logs")
    with strategy.serve(ref) as served:
        assert served.model == ref.served_name
        assert served.base_url is not None
        reply = chat(served.base_url, served.model, "2+2?")
        assert reply.json()["choices"][0]["message"]["content"] == "4"
        assert chat(served.base_url, "other", "2+2?").status_code == 404
    events = read_log(log)
    start = next(e for e in events if e["event"] == "start")
    assert start["argv"][:2] == ["serve", str(tmp_path / "checkpoint-200")]
    assert "--served-model-name" in start["argv"] and "--max-model-len" in start["argv"]
    assert any(e["event"] == "stop" and e["signal"] == signal.SIGTERM for e in events)
    assert not alive(start["pid"])


@pytest.mark.parametrize("interrupt", [RuntimeError("evaluation failed"), KeyboardInterrupt()])
def test_vllm_is_stopped_on_error_and_ctrl_c(
    tmp_path: Path, vllm_bin: Path, monkeypatch: pytest.MonkeyPatch, interrupt: BaseException
) -> None:
    log = tmp_path / "standin.log"
    monkeypatch.setenv("VLLM_STANDIN_LOG", str(log))
    ref = model_ref(write_model(tmp_path / "checkpoint-1"), 1, "r")
    with pytest.raises(type(interrupt)), VLLM(str(vllm_bin)).serve(ref):
        raise interrupt
    pid = next(e["pid"] for e in read_log(log) if e["event"] == "start")
    assert not alive(pid)


def test_vllm_start_failures_show_the_log(tmp_path: Path, vllm_bin: Path) -> None:
    broken = tmp_path / "checkpoint-1"
    broken.mkdir()
    (broken / "model.safetensors").write_bytes(b"x")
    ref = ModelRef(str(broken), 1, "r", None, "f")  # served as named, though it lacks config.json
    with (
        pytest.raises(ServingError, match=r"exited with code 1 before it was healthy(.|\n)*config\.json"),
        VLLM(str(vllm_bin), log_dir=tmp_path).serve(ref),
    ):
        pass
    with (
        pytest.raises(ServingError, match=r"exited with code 2(.|\n)*unrecognized arguments: --no-such-flag"),
        VLLM(str(vllm_bin), ["--no-such-flag"], log_dir=tmp_path).serve(model_ref(write_model(broken), 1, "r")),
    ):
        pass
    with (
        pytest.raises(ServingError, match=r"cannot start.*is vLLM installed"),
        VLLM(str(tmp_path / "no-vllm")).serve(model_ref(broken, 1, "r")),
    ):
        pass
    adapter = model_ref(write_adapter(tmp_path / "checkpoint-2"), 2, "r")
    with (
        pytest.raises(UnservableError, match="serve a LoRA adapter with --serve lora"),
        VLLM(str(vllm_bin)).serve(adapter),
    ):
        pass


def test_vllm_startup_timeout_stops_the_process(
    tmp_path: Path, vllm_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "standin.log"
    monkeypatch.setenv("VLLM_STANDIN_LOG", str(log))
    monkeypatch.setenv("VLLM_STANDIN_STARTUP", "30")
    ref = model_ref(write_model(tmp_path / "checkpoint-1"), 1, "r")
    with (
        pytest.raises(ServingError, match=r"not healthy within 3 s"),
        VLLM(str(vllm_bin), startup_timeout=3.0).serve(ref),
    ):
        pass
    pid = next(e["pid"] for e in read_log(log) if e["event"] == "start")
    assert not alive(pid)


def test_checkpoints_eval_tokenizer_reaches_vllm_serve(
    tmp_path: Path, vllm_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from evalsi.cli.main import app
    from tests.training.conftest import answers, write_spec

    log = tmp_path / "standin.log"
    monkeypatch.setenv("VLLM_STANDIN_LOG", str(log))
    checkpoint = write_model(tmp_path / "out" / "checkpoint-5", answers())
    result = CliRunner().invoke(
        app,
        [
            "checkpoints",
            "eval",
            str(checkpoint),
            "--step",
            "5",
            "-f",
            str(write_spec(tmp_path / "specs")),
            "--training-run",
            "t",
            "--log-dir",
            str(tmp_path / "logs"),
            "--serve",
            "vllm",
            "--vllm-bin",
            str(vllm_bin),
            "--tokenizer",
            "org/base-model",
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    start = next(e for e in read_log(log) if e["event"] == "start")
    position = start["argv"].index("--tokenizer")
    assert start["argv"][position + 1] == "org/base-model"
