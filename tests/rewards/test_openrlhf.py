"""The OpenRLHF file form, loaded and called exactly as ``SingleTurnAgentExecutor`` does (v0.11).

OpenRLHF loads ``--reward.remote_url`` (a ``.py`` path) with ``spec_from_file_location("reward_func", path)``
and calls ``asyncio.to_thread(reward_func, [query], [prompt], [label])``: one sample per call, where the query
is ``tokenizer.decode(prompt_ids + response_ids, skip_special_tokens=False)``.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import evalsi.rewards.openrlhf
from evalsi.errors import DataError, SpecError
from evalsi.rewards._batch import completion_after_prompt
from evalsi.rewards._scorer import clear_shared
from tests.rewards import _adapter_evaluators  # noqa: F401  (registers the test evaluators)
from tests.rewards._keys import without_vector, without_vector_logs
from tests.rewards._servers import ServerThread, ServiceLog, reward_service_app

SPEC: dict[str, Any] = {
    "apiVersion": "evals.si/v1alpha1",
    "kind": "RewardSpec",
    "metadata": {"name": "openrlhf-test"},
    "spec": {
        "components": [
            {"ref": "format-check", "name": "format", "weight": 0.2, "params": {"pattern": r"(?s)<answer>.*</answer>"}},
            {"ref": "contains", "name": "answer", "weight": 0.8},  # the label is the reference
        ],
    },
}

PROMPT = "<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    clear_shared()
    yield
    clear_shared()


@pytest.fixture
def spec_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    monkeypatch.setenv("EVALSI_REWARD_SPEC", str(path))
    return path


def load_like_openrlhf() -> Callable[..., dict[str, Any]]:
    spec = importlib.util.spec_from_file_location("reward_func", evalsi.rewards.openrlhf.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    func: Callable[..., dict[str, Any]] = module.reward_func
    return func


def call_like_openrlhf(func: Callable[..., dict[str, Any]], query: str, prompt: str, label: Any) -> dict[str, Any]:
    async def fetch() -> list[dict[str, Any]]:
        return list(await asyncio.gather(asyncio.to_thread(func, [query], [prompt], [label])))

    return asyncio.run(fetch())[0]


def test_file_form_scores_one_sample(spec_env: Path) -> None:
    func = load_like_openrlhf()
    query = PROMPT + "<answer>42</answer><|im_end|><|endoftext|>"
    out = call_like_openrlhf(func, query, PROMPT, "42")
    assert set(out) == {"rewards", "scores", "extra_logs"}
    # the end-of-sequence tokens are not part of the completion, and the label is the reference
    logs = without_vector(out["extra_logs"])
    assert logs == {"format": [1.0], "answer": [1.0], "format_skipped": [0.0], "answer_skipped": [0.0]}
    assert out["rewards"] == out["scores"] == [pytest.approx(1.0)]
    wrong = call_like_openrlhf(func, PROMPT + "<answer>41</answer><|im_end|>", PROMPT, "42")
    assert wrong["extra_logs"]["format"] == [1.0] and wrong["extra_logs"]["answer"] == [0.0]
    assert wrong["rewards"] == [pytest.approx(0.2)]


def test_batch_with_labels_and_without(spec_env: Path) -> None:
    out = evalsi.rewards.openrlhf.reward_func(
        [PROMPT + "<answer>42</answer>", PROMPT + "no tags</s>"], [PROMPT, PROMPT], None
    )
    # without labels the reference check is skipped: it reads 0.0 in extra_logs, adds nothing, and is counted
    assert without_vector_logs(out) == {
        "rewards": [0.2, 0.0],
        "scores": [0.2, 0.0],
        "extra_logs": {
            "format": [1.0, 0.0],
            "answer": [0.0, 0.0],
            "format_skipped": [0.0, 0.0],
            "answer_skipped": [1.0, 1.0],
        },
    }


def test_empty_lists_answer_empty_lists(spec_env: Path) -> None:
    out = evalsi.rewards.openrlhf.reward_func([], [], [])
    assert without_vector_logs(out) == {
        "rewards": [],
        "scores": [],
        "extra_logs": {"format": [], "answer": [], "format_skipped": [], "answer_skipped": []},
    }


def test_misaligned_lists_name_the_problem(spec_env: Path) -> None:
    with pytest.raises(DataError, match="prompts has 1 items for 2 queries"):
        evalsi.rewards.openrlhf.reward_func(["a", "b"], ["a"], None)


def test_spec_must_be_set() -> None:
    with pytest.raises(SpecError, match="EVALSI_REWARD_SPEC"):
        evalsi.rewards.openrlhf.reward_func(["q"], ["q"], ["l"])


def test_on_error_none_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "none.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "spec": {**SPEC["spec"], "onError": "none"}}))
    monkeypatch.setenv("EVALSI_REWARD_SPEC", str(path))
    with pytest.raises(SpecError, match="OpenRLHF cannot skip"):
        evalsi.rewards.openrlhf.reward_func(["q"], ["q"], ["l"])


def test_server_from_the_environment(spec_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    queries = [PROMPT + "<answer>42</answer><|im_end|>", PROMPT + "x"]
    local = evalsi.rewards.openrlhf.reward_func(queries, [PROMPT, PROMPT], ["42", "42"])
    log = ServiceLog()
    with ServerThread(reward_service_app(log)) as server:
        monkeypatch.setenv("EVALSI_SERVER", server.url)
        clear_shared()
        remote = evalsi.rewards.openrlhf.reward_func(queries, [PROMPT, PROMPT], ["42", "42"])
    assert without_vector_logs(remote) == without_vector_logs(local)
    assert [r["completion"] for r in log.requests[0]["rollouts"]] == ["<answer>42</answer>", "x"]
    assert log.requests[0]["rollouts"][0]["label"] == "42"


@pytest.mark.parametrize(
    ("query", "prompt", "completion"),
    [
        ("PROMPT answer<|im_end|>", "PROMPT ", "answer"),
        ("<s>PROMPT answer</s>", "PROMPT ", "answer"),  # a BOS token in front of the decoded prompt
        ("PROMPT answer<|eot_id|>\n<pad><pad>", "PROMPT ", "answer"),
        ("PROMPT answer  ", "PROMPT ", "answer  "),  # the model's own trailing whitespace stays
        ("decoded differently", "PROMPT ", "decoded differently"),  # prompt not found: the whole query
        ("just text", None, "just text"),
    ],
)
def test_completion_after_prompt(query: str, prompt: str | None, completion: str) -> None:
    assert completion_after_prompt(query, prompt) == completion
