"""OpenRLHF's own ``SingleTurnAgentExecutor`` fetches rewards from evalsi: the ``.py`` file form and the HTTP form.

The executor tokenizes the prompt, asks its engine for a response, decodes prompt + response with
``skip_special_tokens=False`` and calls the reward function (in a thread) or POSTs to the reward server with
aiohttp. Only the generation engine is a stand-in (vLLM needs a GPU): it answers fixed tokens.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import transformers
import yaml
from openrlhf.utils.agent import SingleTurnAgentExecutor

import evalsi.rewards.openrlhf
from evalsi.rewards import clear_shared, load
from evalsi.rewards.serve import create_app
from tests.rewards._keys import without_vector
from tests.rewards._servers import ServerThread

WORDS = ["what", "is", "2+2", "?", "4", "5", "<answer>", "</answer>"]
SPEC: dict[str, Any] = {
    "apiVersion": "evals.si/v1alpha1",
    "kind": "RewardSpec",
    "metadata": {"name": "openrlhf-executor"},
    "spec": {
        "components": [
            {"ref": "exact-match", "name": "exact", "weight": 0.75},
            {
                "ref": "format-check",
                "name": "format",
                "weight": 0.25,
                "params": {"pattern": r"\s*<answer> \S+ </answer>\s*"},
            },
        ],
    },
}


def tokenizer() -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


class FixedEngine:
    """Stands in for OpenRLHF's vLLM engine: answers the given text's tokens, then EOS."""

    def __init__(self, tok: Any, text: str) -> None:
        self.ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]

    async def generate(self, prompt_ids: list[int], params: Any, multi_modal_data: Any = None) -> Any:
        output = SimpleNamespace(token_ids=list(self.ids), finish_reason="stop", logprobs=None, text="")
        return SimpleNamespace(outputs=[output])


def execute(url: str, answer: str, label: str) -> dict[str, Any]:
    tok = tokenizer()
    executor = SingleTurnAgentExecutor(remote_rm_url=url)
    params = SimpleNamespace(max_tokens=8, logprobs=None)
    result: dict[str, Any] = asyncio.run(
        executor.execute("what is 2+2 ?", label, params, 32, tok, FixedEngine(tok, answer))
    )
    return result


@pytest.fixture
def spec_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    clear_shared()
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    monkeypatch.setenv("EVALSI_REWARD_SPEC", str(path))
    yield path
    clear_shared()


def as_float(value: Any) -> float:
    return float(torch.as_tensor(value).flatten()[0])


def test_file_form(spec_file: Path) -> None:
    good = execute(evalsi.rewards.openrlhf.__file__, "<answer> 4 </answer>", "<answer> 4 </answer>")
    assert as_float(good["reward"]) == pytest.approx(1.0)
    assert as_float(good["scores"]) == pytest.approx(1.0)
    logs = {k: as_float(v) for k, v in good["extra_logs"].items()}
    call = logs.pop("reward/latency_ms")
    percentiles = [logs.pop(f"reward/latency_ms/p{q}") for q in (50, 90, 99)]
    assert call > 0.0 and 0.0 < percentiles[0] <= percentiles[1] <= percentiles[2] <= call
    assert logs == {
        "exact": 1.0,
        "format": 1.0,
        "exact_skipped": 0.0,
        "format_skipped": 0.0,
        "reward/exact": 1.0,
        "reward/format": 1.0,
        "reward_weight/exact": 0.75,
        "reward_weight/format": 0.25,
    }
    wrong = execute(evalsi.rewards.openrlhf.__file__, "<answer> 5 </answer>", "<answer> 4 </answer>")
    assert as_float(wrong["reward"]) == pytest.approx(0.25)


def test_http_form(spec_file: Path) -> None:
    with ServerThread(create_app(load(spec_file))) as server:
        good = execute(server.url + "/get_reward", "<answer> 4 </answer>", "<answer> 4 </answer>")
        wrong = execute(server.url, "5", "<answer> 4 </answer>")
    assert good["reward"] == [1.0] and good["scores"] == [1.0]
    skips = {"exact_skipped": [0.0], "format_skipped": [0.0]}
    assert without_vector(good["extra_logs"]) == {"exact": [1.0], "format": [1.0], **skips}
    assert wrong["reward"] == [0.0]
    assert without_vector(wrong["extra_logs"]) == {"exact": [0.0], "format": [0.0], **skips}
    assert wrong["extra_logs"]["reward/format"] == [0.0] and wrong["extra_logs"]["reward_weight/exact"] == [0.75]


def test_file_form_logs_the_monitors_of_each_step_s_rollouts_and_writes_the_stop_file(
    spec_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop = tmp_path / "stop.json"
    monkeypatch.setenv("EVALSI_MONITOR", "1")
    monkeypatch.setenv("EVALSI_MONITOR_BATCH", "4")  # rollouts per step: OpenRLHF calls once per rollout
    monkeypatch.setenv("EVALSI_MONITOR_STOP_ON", "monitor:duplicate_completions")
    monkeypatch.setenv("EVALSI_MONITOR_STOP_FILE", str(stop))
    distinct = ["4", "5", "what is 4", "<answer> 4 </answer>"]
    logs: list[dict[str, float]] = []
    for step in range(6):  # three steps of distinct answers, then three where every rollout says the same
        for answer in distinct if step < 3 else ["4"] * 4:
            out = execute(evalsi.rewards.openrlhf.__file__, answer, "4")
            logs.append({k: as_float(v) for k, v in out["extra_logs"].items()})
    keys = {f"monitor/duplicate_completions{s}" for s in ("", "/fired", "/threshold")}
    assert all(keys <= set(entry) for entry in logs)  # every answer has every key (OpenRLHF gathers them per step)
    assert math.isnan(logs[0]["monitor/duplicate_completions"])  # nothing read before the first step's four
    assert logs[3]["monitor/duplicate_completions"] == 0.0 and logs[3]["monitor/duplicate_completions/fired"] == 0.0
    assert logs[-1]["monitor/duplicate_completions/fired"] == 1.0
    assert logs[-1]["monitor/duplicate_completions/threshold"] == pytest.approx(0.25)
    assert json.loads(stop.read_text())["monitor"] == "duplicate_completions"
