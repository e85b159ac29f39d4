"""GRPO with TRL on evalsi's reward, and every checkpoint evaluated during training with ``evalsi_callback``.

What it shows:

- ``reward_funcs("math-reward.yaml")``: the total to train on, and one function per component (weight 0) so TRL
  logs ``rewards/math-grpo/<component>/mean`` beside it.
- ``evalsi_callback``: the model before training (the base) and each save are evaluated against
  ``math-run.yaml`` on a background thread while training goes on; each result is logged once, at its
  checkpoint's step, as ``eval/gsm-toy/<metric>`` in TensorBoard or W&B (``eval_gsm-toy/<metric>`` in
  ``trainer.state.log_history``), and the results files go under ``OUTPUT_DIR/evalsi-logs`` for
  ``evalsi checkpoints curve``.
- ``--stop-file PATH``: training stops at the next step once PATH exists, e.g. written by
  ``evalsi checkpoints watch --stop-file PATH`` in another terminal (see watch-checkpoints.sh).

Run it (``pip install 'evalsi[trl]'``; a CPU is enough):

    python examples/finetuning/grpo_trl.py --output-dir grpo-out --report-to tensorboard   # pip install tensorboard
    python examples/finetuning/grpo_trl.py --model Qwen/Qwen2.5-0.5B-Instruct --max-steps 200 --save-steps 50

Without ``--model`` it builds a tiny untrained model under OUTPUT_DIR (nothing is downloaded), so the scores are
those of a random model; the mechanics are the real ones. Each checkpoint is served in-process with
``Transformers()``; on a GPU with vLLM, serve them with ``VLLM()`` or ``LoRA(base_url)`` instead.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import datasets
import transformers
import trl

from evalsi.rewards.trl import reward_funcs
from evalsi.training import CheckpointEvaluator, Transformers
from evalsi.training.callback import evalsi_callback

HERE = Path(__file__).resolve().parent
TEMPLATE = "{question}\nPut the final answer in \\boxed{{}}."  # the prompt math-run.yaml evaluates with


def problems() -> list[dict[str, str]]:
    """The math word problems as GRPO rows: ``prompt``, and ``answer`` (the reference the reward reads)."""
    rows = [json.loads(line) for line in (HERE / "math-problems.jsonl").read_text().splitlines() if line.strip()]
    return [{"prompt": TEMPLATE.format(question=row["question"]), "answer": str(row["answer"])} for row in rows]


def tiny_model(directory: Path, texts: list[str]) -> str:
    """A small Llama and a byte-level tokenizer trained on ``texts``, built here and saved to ``directory``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    core.train_from_iterator(
        texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["<pad>", "<eos>"], initial_alphabet=alphabet)
    )
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    transformers.set_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def main(argv: list[str] | None = None) -> Any:
    """Train, evaluating as it goes; returns the trainer (its ``state.log_history`` holds every evaluation)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, default=Path("grpo-out"))
    parser.add_argument("--model", help="a model name or path (default: a tiny model built here)")
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--save-steps", type=int, default=2)
    parser.add_argument("--stop-file", type=Path, help="stop training once this file exists")
    parser.add_argument("--report-to", default="none", help="tensorboard, wandb, mlflow... (default: none)")
    args = parser.parse_args(argv)

    rows = problems()
    model = args.model or tiny_model(args.output_dir / "tiny-model", [row["prompt"] for row in rows])
    funcs, weights = reward_funcs(HERE / "math-reward.yaml")
    evaluator = CheckpointEvaluator(
        HERE / "math-run.yaml",
        training_run="grpo-demo",
        serving=Transformers(),  # each checkpoint served in-process, on the CPU
        log_dir=args.output_dir / "evalsi-logs",
        overrides=["sampling.maxTokens=32"],  # short answers keep the example quick on a CPU
    )
    config = trl.GRPOConfig(
        output_dir=str(args.output_dir),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=32,
        max_steps=args.max_steps,
        save_strategy="steps",
        save_steps=args.save_steps,
        logging_steps=1,
        learning_rate=1e-4,
        reward_weights=weights,
        report_to=args.report_to,
        use_cpu=not transformers.utils.is_torch_cuda_available(),
        bf16=False,
        seed=0,
    )
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=config,
        train_dataset=datasets.Dataset.from_list(rows),
        callbacks=[evalsi_callback(evaluator, stop_file=args.stop_file, before_training=True)],
    )
    trainer.train()

    print(f"trained {trainer.state.global_step} steps; evaluations, by checkpoint step (0 = before training):")
    for entry in trainer.state.log_history:
        if "eval_step" in entry:
            metrics = ", ".join(f"{k.removeprefix('eval_')}={v:.3f}" for k, v in entry.items() if "/" in k)
            print(f"  step {int(entry['eval_step'])}: {metrics}")
    return trainer


if __name__ == "__main__":
    main()
