"""verl's own reward managers score a real ``DataProto`` batch through ``evalsi/rewards/verl.py``.

The function is loaded by verl's ``get_custom_reward_fn`` from the ``custom_reward_function`` config, exactly
as a training run does; the tokenizer is built here (nothing downloaded).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers
import yaml
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.reward import get_custom_reward_fn
from verl.workers.reward_manager import BatchRewardManager, NaiveRewardManager

import evalsi.rewards.verl
from evalsi.rewards import clear_shared

WORDS = ["what", "is", "2+2", "?", "4", "5", "no"]
SPEC: dict[str, Any] = {
    "apiVersion": "evals.si/v1alpha1",
    "kind": "RewardSpec",
    "metadata": {"name": "verl-managers"},
    "spec": {
        "components": [
            {"ref": "exact-match", "name": "exact", "weight": 0.75},
            {"ref": "contains", "name": "listed", "weight": 0.25, "params": {"text": "4"}},
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


def batch(tok: Any, responses: list[str], truths: list[str], extras: list[dict[str, Any]]) -> DataProto:
    """A rollout batch as verl builds it: left-padded prompts, right-padded responses, one attention mask."""
    prompt_ids = torch.tensor([tok("what is 2+2 ?")["input_ids"]] * len(responses))
    encoded = [tok(r)["input_ids"] + [tok.eos_token_id] for r in responses]
    width = max(len(e) for e in encoded)
    response_ids = torch.tensor([e + [tok.pad_token_id] * (width - len(e)) for e in encoded])
    mask = torch.cat([torch.ones_like(prompt_ids), (response_ids != tok.pad_token_id).long()], dim=1)
    return DataProto.from_dict(
        tensors={"prompts": prompt_ids, "responses": response_ids, "attention_mask": mask},
        non_tensors={
            "data_source": np.array(["openai/gsm8k"] * len(responses), dtype=object),
            "reward_model": np.array([{"ground_truth": t} for t in truths], dtype=object),
            "extra_info": np.array(extras, dtype=object),
        },
    )


def config(name: str, spec: Path) -> Any:
    return OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": evalsi.rewards.verl.__file__,
                    "name": name,
                    "reward_kwargs": {"spec": str(spec)},
                }
            }
        }
    )


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    clear_shared()
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return path


def check(out: dict[str, Any], data: DataProto) -> None:
    rewards = out["reward_tensor"]
    lengths = data.batch["attention_mask"][:, data.batch["prompts"].shape[-1] :].sum(-1)
    # the total sits on each response's last valid token, and nowhere else
    assert rewards.sum(-1).tolist() == pytest.approx([1.0, 0.0, 0.25])
    assert [rewards[i, lengths[i] - 1].item() for i in range(3)] == pytest.approx([1.0, 0.0, 0.25])
    info = out["reward_extra_info"]
    assert list(info["score"]) == pytest.approx([1.0, 0.0, 0.25])
    assert list(info["exact"]) == [1.0, 0.0, 0.0]
    assert list(info["listed"]) == [1.0, 0.0, 1.0]
    # the reward vector and weights, per rollout, for per-component normalisation; the scoring latency
    assert list(info["reward/exact"]) == [1.0, 0.0, 0.0]
    assert list(info["reward/listed"]) == [1.0, 0.0, 1.0]
    assert list(info["reward_weight/exact"]) == [0.75] * 3 and list(info["reward_weight/listed"]) == [0.25] * 3
    assert len(info["reward/latency_ms"]) == 3 and all(v > 0.0 for v in info["reward/latency_ms"])
    # each rollout's own scoring time, as percentiles: never above the call that held it
    p50, p90, p99 = (list(info[f"reward/latency_ms/p{q}"]) for q in (50, 90, 99))
    assert len(p50) == len(p90) == len(p99) == 3
    assert all(0.0 < a <= b <= c for a, b, c in zip(p50, p90, p99, strict=True))


def test_naive_reward_manager(spec_file: Path) -> None:
    tok = tokenizer()
    data = batch(tok, ["4", "5", "no 4"], ["4", "4", "4"], [{"index": i} for i in range(3)])
    fn = get_custom_reward_fn(config("compute_score", spec_file))
    check(NaiveRewardManager(tok, num_examine=0, compute_score=fn)(data, return_dict=True), data)


def test_batch_reward_manager(spec_file: Path) -> None:
    tok = tokenizer()
    data = batch(tok, ["4", "5", "no 4"], ["4", "4", "4"], [{"tests": np.array(["4"])} for _ in range(3)])
    fn = get_custom_reward_fn(config("compute_score_batch", spec_file))
    manager = BatchRewardManager(tok, num_examine=0, compute_score=fn)
    check(manager(data, return_dict=True), data)


def test_batch_reward_manager_scores_groups(tmp_path: Path) -> None:
    clear_shared()
    path = tmp_path / "group.yaml"
    spec = {**SPEC, "spec": {"components": [{"ref": "group-diversity", "params": {"group_by": "index"}}]}}
    path.write_text(yaml.safe_dump(spec))
    tok = tokenizer()
    # two rollouts of prompt 0 wrote the same answer; prompt 1's rollout is alone in its group
    data = batch(tok, ["4", "4", "4"], ["4", "4", "4"], [{"index": 0}, {"index": 0}, {"index": 1}])
    fn = get_custom_reward_fn(config("compute_score_batch", path))
    out = BatchRewardManager(tok, num_examine=0, compute_score=fn)(data, return_dict=True)
    assert out["reward_tensor"].sum(-1).tolist() == pytest.approx([0.5, 0.5, 1.0])
    assert list(out["reward_extra_info"]["reward/group-diversity"]) == [0.5, 0.5, 1.0]


DISTINCT = ["4", "5", "no 4", "what is 4"]
MONITOR_KEYS = {f"monitor/duplicate_completions{s}" for s in ("", "/fired", "/threshold")}


def monitored_config(name: str, spec: Path, stop: Path, **more: Any) -> Any:
    kwargs = {
        "spec": str(spec),
        "monitor": True,
        "monitor_stop_on": "monitor:duplicate_completions",
        "monitor_stop_file": str(stop),
        **more,
    }
    return OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {"path": evalsi.rewards.verl.__file__, "name": name, "reward_kwargs": kwargs}
            }
        }
    )


def steps(tok: Any, manager: Any, count: int, collapse_from: int) -> list[dict[str, Any]]:
    """``count`` training steps of two groups of four rollouts; from ``collapse_from`` each group says one thing."""
    infos = []
    for step in range(count):
        responses = (["4"] * 4 if step >= collapse_from else DISTINCT) * 2
        data = batch(tok, responses, ["4"] * 8, [{"index": i // 4} for i in range(8)])
        infos.append(manager(data, return_dict=True)["reward_extra_info"])
    return infos


def test_the_batch_manager_logs_the_monitors_and_a_collapse_into_duplicates_writes_the_stop_file(
    spec_file: Path, tmp_path: Path
) -> None:
    tok = tokenizer()
    stop = tmp_path / "stop.json"
    fn = get_custom_reward_fn(monitored_config("compute_score_batch", spec_file, stop))
    infos = steps(tok, BatchRewardManager(tok, num_examine=0, compute_score=fn), 6, collapse_from=3)
    for info in infos:  # every rollout carries every monitor key (verl gathers each key over the batch)
        assert set(info) >= MONITOR_KEYS and all(len(info[k]) == 8 for k in MONITOR_KEYS)
    assert list(infos[0]["monitor/duplicate_completions"]) == [0.0] * 8
    # a signal that does not apply (no component runs code) reads NaN, in every step
    assert all(math.isnan(v) for info in infos for v in info["monitor/sandbox_verdicts"])
    assert infos[2]["monitor/duplicate_completions/fired"][0] == 0.0
    assert infos[-1]["monitor/duplicate_completions/fired"][0] == 1.0
    # the baseline had no duplicates: the logged level is the rise itself
    assert infos[-1]["monitor/duplicate_completions/threshold"][0] == pytest.approx(0.25)
    written = json.loads(stop.read_text())
    assert written["monitor"] == "duplicate_completions" and written["step"] == 3


def test_the_per_sample_manager_reads_a_step_s_rollouts_as_one_batch(spec_file: Path, tmp_path: Path) -> None:
    tok = tokenizer()
    stop = tmp_path / "stop.json"
    fn = get_custom_reward_fn(monitored_config("compute_score", spec_file, stop, monitor_batch=8))
    infos = steps(tok, NaiveRewardManager(tok, num_examine=0, compute_score=fn), 6, collapse_from=3)
    for info in infos:
        assert set(info) >= MONITOR_KEYS and all(len(info[k]) == 8 for k in MONITOR_KEYS)
    # nothing is measured until the first eight rollouts were read; then each step's values are the last step's
    assert all(math.isnan(v) for v in infos[0]["monitor/duplicate_completions"][:7])
    assert infos[0]["monitor/duplicate_completions"][7] == 0.0
    assert infos[-1]["monitor/duplicate_completions/fired"][-1] == 1.0
    assert json.loads(stop.read_text())["monitor"] == "duplicate_completions"
