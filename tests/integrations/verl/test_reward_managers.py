"""verl's own reward managers score a real ``DataProto`` batch through ``evalsi/rewards/verl.py``.

The function is loaded by verl's ``get_custom_reward_fn`` from the ``custom_reward_function`` config, exactly
as a training run does; the tokenizer is built here (nothing downloaded).
"""

from __future__ import annotations

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
