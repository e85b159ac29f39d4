"""CheckpointEvaluator: step results files, reuse of complete results, regressions against the base."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from evalsi.errors import SpecError
from evalsi.rewards import Reward, from_mapping
from evalsi.runs import BoundRun
from evalsi.runs._curve import step_files
from evalsi.training import CheckpointEvaluator, Endpoint, LoRA
from tests.helpers.openai_server import OpenAIServer
from tests.helpers.vllm_standin import read_log
from tests.training.conftest import RunningVLLM, answers, write_adapter, write_model, write_spec


def test_endpoint_steps_write_results_with_checkpoint_metadata(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "specs")
    with OpenAIServer(answers=answers(), default="?") as server:
        evaluator = CheckpointEvaluator(
            [spec], "grpo-1", Endpoint(server.base_url, "served"), log_dir=tmp_path / "logs"
        )
        base = evaluator.evaluate("org/base", None)
        assert base.status == "ok" and base.label == "base"
        assert {r["model"] for r in server.requests} == {"served"}
        ckpt = write_model(tmp_path / "out" / "checkpoint-100")
        step = evaluator.evaluate(ckpt, 100, settled_at=1_700_000_000.0)
        requests = len(server.requests)
        again = evaluator.evaluate(ckpt, 100)
        assert len(server.requests) == requests  # complete results are never evaluated again
    assert step.status == "ok" and not step.specs[0].reused and again.specs[0].reused
    files = step_files(tmp_path / "logs", "grpo-1", "forgetting")
    assert list(files) == [None, 100]
    assert files[100] == tmp_path / "logs" / "grpo-1" / "forgetting" / "step-100.json"
    data = orjson.loads(files[100].read_bytes())
    assert data["kind"] == "RunResults" and data["status"] == "complete" and data["name"] == "forgetting@step-100"
    assert len(data["records"]) == 30 and data["records"][0]["samples"][0]["scores"]["exact-match"]["value"] == 1.0
    meta = data["checkpoint"]
    assert meta["step"] == 100 and meta["trainingRun"] == "grpo-1" and meta["kind"] == "weights"
    assert meta["serving"] == "endpoint" and meta["settledAt"].startswith("2023-11-14")
    assert not list((tmp_path / "logs").rglob("*.journal"))


def test_lora_steps_regress_against_the_base(tmp_path: Path, lora_vllm: RunningVLLM) -> None:
    spec = write_spec(tmp_path / "specs", gate_min=0.5)
    out = tmp_path / "out"
    good = write_adapter(out / "checkpoint-100", answers(wrong=1))
    bad = write_adapter(out / "checkpoint-200", answers(wrong=12))
    evaluator = CheckpointEvaluator(
        [spec], "grpo-1", LoRA(lora_vllm.base_url), regression=["exact-match:0.1"], log_dir=tmp_path / "logs"
    )
    first = evaluator.evaluate(good, 100)  # no base yet: nothing to compare with
    assert first.status == "ok" and not first.specs[0].comparisons
    assert evaluator.evaluate("base", None).status == "ok"  # the base model, as the server serves it
    result = evaluator.evaluate(bad, 200)
    assert result.regressed and result.status == "regressed"
    assert [str(r) for r in result.specs[0].regressions] == ["exact-match:0.1"]
    assert result.specs[0].comparisons["exact-match"].difference.mean == pytest.approx(-0.4)
    assert evaluator.evaluate(good, 100).status == "ok"  # reused, now compared: a drop of 1/30 is no regression
    loads = [e["body"]["lora_name"] for e in read_log(lora_vllm.log) if e.get("path") == "/v1/load_lora_adapter"]
    assert len(loads) == 2 and len(set(loads)) == 2 and all(n.startswith("grpo-1-step-") for n in loads)


def test_spec_gates_apply_to_each_step(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "specs", gate_min=0.9)
    with OpenAIServer(answers=answers(wrong=6), default="?") as server:
        evaluator = CheckpointEvaluator([spec], "r", Endpoint(server.base_url, "m"), log_dir=tmp_path / "logs")
        result = evaluator.evaluate(write_model(tmp_path / "checkpoint-1"), 1)
    assert result.status == "gate failed" and not result.gates_passed and not result.regressed


def test_bad_configuration_is_refused_up_front(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "specs")
    with pytest.raises(SpecError, match=r"'accuracy' is not a metric of the run specs.*exact-match"):
        CheckpointEvaluator([spec], "r", regression=["accuracy"])
    with pytest.raises(SpecError, match="MAX_DROP"):
        CheckpointEvaluator([spec], "r", regression=["exact-match:-1"])
    with pytest.raises(SpecError, match="share a name"):
        CheckpointEvaluator([spec, spec], "r")
    with pytest.raises(SpecError, match="--training-run"):
        CheckpointEvaluator([spec], " ")


def test_a_scorer_factory_scores_every_steps_generations(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "specs")
    asked: list[str] = []

    def scorer(run: BoundRun) -> Reward:
        asked.append(run.spec.name)
        # the same component name, another verdict: only answers of one digit (a0 to a9) count
        return from_mapping({"components": [{"ref": "regex", "name": "exact-match", "params": {"pattern": r"^a\d$"}}]})

    with OpenAIServer(answers=answers(), default="?") as server:
        evaluator = CheckpointEvaluator(
            [spec], "grpo-1", Endpoint(server.base_url, "served"), log_dir=tmp_path / "logs", scorer=scorer
        )
        assert evaluator.evaluate("org/base", None).status == "ok"
        assert evaluator.evaluate(write_model(tmp_path / "out" / "checkpoint-100"), 100).status == "ok"
    assert asked == ["forgetting@base", "forgetting@step-100"]
    data = orjson.loads(step_files(tmp_path / "logs", "grpo-1", "forgetting")[100].read_bytes())
    completions = [s["completion"] for r in data["records"] for s in r["samples"]]
    values = [s["scores"]["exact-match"]["value"] for r in data["records"] for s in r["samples"]]
    assert values == [len(c) == 2 for c in completions]
    assert sum(values) == 10


def test_a_step_file_is_written_once_with_its_checkpoint_section_and_not_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = write_spec(tmp_path / "specs")
    step_path = tmp_path / "logs" / "grpo-1" / "forgetting" / "step-100.json"
    events: list[tuple[str, Any]] = []
    replace, read_bytes = os.replace, Path.read_bytes

    def watched_replace(src: Any, dst: Any) -> None:  # every atomic write ends in a rename over the file
        if Path(dst) == step_path:
            written = orjson.loads(read_bytes(Path(src)))
            events.append(("write", (written["status"], "checkpoint" in written)))
        replace(src, dst)

    def watched_read(self: Path) -> bytes:
        if self == step_path:
            events.append(("read", None))
        return read_bytes(self)

    with OpenAIServer(answers=answers(wrong=3), default="?") as server:
        evaluator = CheckpointEvaluator(
            [spec], "grpo-1", Endpoint(server.base_url, "served"), regression=["exact-match"], log_dir=tmp_path / "logs"
        )
        assert evaluator.evaluate("org/base", None).status == "ok"
        monkeypatch.setattr(os, "replace", watched_replace)
        monkeypatch.setattr(Path, "read_bytes", watched_read)
        result = evaluator.evaluate(write_model(tmp_path / "out" / "checkpoint-100"), 100)
    assert events == [("write", ("complete", True))]  # written whole once, with its section; used from memory
    assert result.specs[0].comparisons["exact-match"].difference.mean == pytest.approx(0.0)
    assert result.specs[0].means["exact-match"].mean == pytest.approx(27 / 30)
    section = orjson.loads(step_path.read_bytes())["checkpoint"]
    assert section["step"] == 100 and section["trainingRun"] == "grpo-1" and section["evaluatedAt"]
