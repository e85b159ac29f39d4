"""Stands in for ``python -m openrlhf.cli.train_ppo_ray`` (a GPU job) when an example script launches it.

It parses the command line with OpenRLHF's own argument parser (taken from ``train_ppo_ray.py``, where it is built
under ``if __name__ == "__main__"``), so an option the installed OpenRLHF does not know fails as it would there;
then it does what OpenRLHF does with the reward options: each dataset row becomes a prompt and a label through
OpenRLHF's ``preprocess_data``, and OpenRLHF's ``SingleTurnAgentExecutor`` gets its reward from
``--reward.remote_url``. Only the policy is a stand-in (vLLM needs a GPU): it answers the label, boxed, for
even rows and the label plus one for odd rows. One JSON line per row goes to ``$STANDIN_OUT``.

Run as ``python trainer_standin.py <train_ppo_ray options>``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sys
import textwrap
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def openrlhf_parser() -> argparse.ArgumentParser:
    """The parser ``train_ppo_ray.py`` builds, from its own source lines."""
    spec = importlib.util.find_spec("openrlhf.cli.train_ppo_ray")
    assert spec is not None and spec.origin is not None
    lines = Path(spec.origin).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "parser = argparse.ArgumentParser()" in line)
    end = next(i for i, line in enumerate(lines) if "args = parser.parse_args()" in line)
    namespace: dict[str, Any] = {"argparse": argparse, "os": os, "datetime": datetime}
    exec(textwrap.dedent("\n".join(lines[start:end])), namespace)
    parser: argparse.ArgumentParser = namespace["parser"]
    return parser


def tokenizer(texts: list[str]) -> Any:
    """A byte-level BPE tokenizer trained here on the texts (nothing downloaded); decoding gives the text back."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<pad>", "<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    core.train_from_iterator(texts, trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")


class AnsweringEngine:
    """The policy: answers the given text's tokens, then EOS (as OpenRLHF's vLLM engine returns them)."""

    def __init__(self, tok: Any, text: str) -> None:
        self.ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]

    async def generate(self, prompt_ids: list[int], params: Any, multi_modal_data: Any = None) -> Any:
        output = SimpleNamespace(token_ids=list(self.ids), finish_reason="stop", logprobs=None, text="")
        return SimpleNamespace(outputs=[output])


def first(value: Any) -> float:
    """The one value of a reward or log entry (a tensor, a list or a number)."""
    import torch

    return float(torch.as_tensor(value).flatten()[0])


def main(argv: list[str]) -> None:
    from openrlhf.datasets.prompts_dataset import preprocess_data
    from openrlhf.utils.agent import SingleTurnAgentExecutor
    from openrlhf.utils.config import hierarchize

    args = hierarchize(openrlhf_parser().parse_args(argv))
    rows = [json.loads(line) for line in Path(args.data.prompt_dataset).read_text().splitlines() if line.strip()]
    samples = [preprocess_data(row, args.data.input_template, args.data.input_key, args.data.label_key) for row in rows]
    answers = [f"So the answer is \\boxed{{{int(label) + index % 2}}}." for index, (_, label) in enumerate(samples)]
    tok = tokenizer([prompt for prompt, _ in samples] + answers)
    executor = SingleTurnAgentExecutor(remote_rm_url=args.reward.remote_url.split(","))
    params = SimpleNamespace(max_tokens=64, logprobs=None)
    with open(os.environ["STANDIN_OUT"], "w") as out:
        for (prompt, label), answer in zip(samples, answers, strict=True):
            result = asyncio.run(executor.execute(prompt, label, params, 1024, tok, AnsweringEngine(tok, answer)))
            logs = {key: first(value) for key, value in result["extra_logs"].items()}
            out.write(json.dumps({"label": label, "answer": answer, "reward": first(result["reward"]), **logs}))
            out.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
