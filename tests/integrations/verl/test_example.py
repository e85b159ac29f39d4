"""examples/finetuning/verl-reward.yaml as written: composed with Hydra on top of verl's own config, it makes
verl's ``load_reward_manager`` (what a training run calls) score rollouts with evalsi's reward."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers
from hydra import compose, initialize_config_dir
from verl import DataProto
from verl.trainer.ppo.reward import load_reward_manager

from evalsi.rewards import clear_shared

ROOT = Path(__file__).parents[3]
WORDS = ["what", "is", "2+2", "?", "\\boxed{4}", "\\boxed{5}", "maybe", "4"]


def tokenizer() -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


def sample(tok: Any, response: str, truth: str) -> DataProto:
    """One rollout as verl's reward loop hands it over: prompt, response with its EOS, one attention mask."""
    prompt_ids = torch.tensor([tok("what is 2+2 ?")["input_ids"]])
    response_ids = torch.tensor([tok(response)["input_ids"] + [tok.eos_token_id]])
    mask = torch.ones(1, prompt_ids.shape[1] + response_ids.shape[1], dtype=torch.long)
    return DataProto.from_dict(
        tensors={"prompts": prompt_ids, "responses": response_ids, "attention_mask": mask},
        non_tensors={
            "data_source": np.array(["gsm8k"], dtype=object),
            "reward_model": np.array([{"ground_truth": truth}], dtype=object),
            "extra_info": np.array([{"index": 0}], dtype=object),
        },
    )


def test_the_verl_example_config_scores_with_evalsis_reward(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_shared()
    monkeypatch.chdir(ROOT)  # the example runs from the repository root
    with initialize_config_dir(config_dir=str(ROOT / "examples" / "finetuning"), version_base=None):
        config = compose(config_name="verl-reward")
    assert config.algorithm.adv_estimator == "grpo"  # verl's own defaults are under it
    tok = tokenizer()
    manager = load_reward_manager(config, tok)
    scored = [
        manager.loop.run_until_complete(manager.run_single(sample(tok, response, "4")))
        for response in ("\\boxed{4}", "\\boxed{5}", "maybe 4")
    ]
    # right and boxed; boxed but wrong (the format gate's 0.1); unboxed: the gate fails, the total is the floor
    assert [s["reward_score"] for s in scored] == pytest.approx([1.0, 0.1, 0.0])
    assert [s["reward_extra_info"]["correct"] for s in scored] == [1.0, 0.0, 1.0]
    assert [s["reward_extra_info"]["format"] for s in scored] == [1.0, 1.0, 0.0]
