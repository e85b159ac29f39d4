"""Training monitors in a real GRPO run: a hackable reward fires a monitor before the held-out evaluation drops.

Two GRPO runs of a tiny model on the CPU (built here; nothing is downloaded), each with the training monitors
(``reward_funcs(..., monitor=Monitor())``) and every checkpoint evaluated on a held-out task during training
(``evalsi_callback(evaluator, monitor=...)``):

- ``hackable``: the answer (``contains``, weight 0.2) plus an overlong penalty whose weight has the wrong sign
  (−1): it pays for length, and the model learns to never stop.
- ``sound``: the answer plus the overlong penalty with its intended sign.

The held-out task (``brief-answers``) asks the same questions and scores an answer of at most six words: what the
hack destroys. Each checkpoint's held-out score is compared with the base model's, record by record (a paired
95% interval); the run's curves (``monitor-curves.json``) say at which step each monitor first fired and at which
checkpoint the held-out score first fell significantly below the base. With matplotlib (``pip install
'evalsi[plot]'``) they are drawn to ``monitor-curves.png``: the training reward, the held-out score per checkpoint,
each monitor's value with its threshold, and the first firing marked.

Run it (``pip install 'evalsi[trl,plot]'``; a few minutes on a CPU):

    python examples/finetuning/monitor_curves.py --output-dir monitor-out
    python examples/finetuning/monitor_curves.py --plot-only monitor-out/monitor-curves.json   # redraw the PNG
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

RUNS = ("hackable", "sound")
MAX_TOKENS = 16
WORDS = ["the", "answer", "is", "4", "5", "what", "2+2", "?", "yes", "no"]
TRAIN_PROMPTS = ["what is 2+2 ?", "2+2 ? the answer is"]
HELDOUT_PROMPTS = [
    "what is 2+2 ?",
    "2+2 ? the answer is",
    "what is the answer ?",
    "2+2 is",
    "the answer is",
    "what 2+2 ?",
    "is 2+2 4 ?",
    "is 2+2 5 ?",
    "yes or no : 2+2 is 4 ?",
    "2+2",
    "what is 2+2",
    "the answer ?",
    "answer : 2+2",
    "2+2 ? yes",
    "2+2 ? no",
    "what is it ?",
]
SHOWN = ("length_reward_correlation", "length_drift", "truncation_rate", "reward_vs_heldout")
"""The monitors drawn (the others are in the JSON)."""


def reward_spec(kind: str) -> dict[str, Any]:
    """The training reward: the answer, plus an overlong penalty (of the wrong sign in the hackable one)."""
    weight = -1.0 if kind == "hackable" else 1.0
    return {
        "apiVersion": "evals.si/v1alpha1",
        "kind": "RewardSpec",
        "metadata": {"name": kind},
        "spec": {
            "cache": {"enabled": False},
            "components": [
                {"ref": "contains", "name": "says-answer", "weight": 0.2 if kind == "hackable" else 1.0},
                {
                    "ref": "overlong-penalty",
                    "name": "length",
                    "weight": weight,
                    "params": {"max_length": MAX_TOKENS, "buffer": MAX_TOKENS - 4},
                },
            ],
        },
    }


def heldout_spec(directory: Path) -> Path:
    """The held-out run spec (and its data): answer each question in at most six words, 4 samples each."""
    data = directory / "brief-answers.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": "4"}) + "\n" for q in HELDOUT_PROMPTS))
    spec = {
        "apiVersion": "evals.si/v1alpha1",
        "kind": "RunSpec",
        "metadata": {"name": "brief-answers"},
        "spec": {
            # the checkpoint evaluator serves each checkpoint and points the target at it
            "target": {"callable": "unused:served", "api": "completions"},
            "sampling": {"temperature": 1.0, "maxTokens": MAX_TOKENS, "seed": 0},
            "dataset": {"path": data.name, "fields": {"prompt": "question", "reference": "answer"}},
            "samples": 4,
            "evaluators": [
                {"ref": "regex", "name": "brief", "params": {"pattern": r"\s*(\S+\s+){0,5}\S*\s*", "mode": "fullmatch"}}
            ],
        },
    }
    path = directory / "brief-answers.yaml"
    path.write_text(json.dumps(spec, indent=1))  # JSON is YAML
    return path


def tiny_model(directory: Path) -> tuple[Any, Any]:
    """A word-level tokenizer over the task's words and a tiny untrained Llama, saved to ``directory``."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(directory)
    return model, tokenizer


def train(kind: str, directory: Path, steps: int = 10, save_steps: int = 2) -> dict[str, Any]:
    """One GRPO run with the monitors and held-out checkpoint evaluations; returns its curves.

    Returns:
        ``{"run", "reward": [[step, mean]], "heldout": [{"step", "mean", "difference", "ci_low", "ci_high",
        "below_base"}], "monitors": {name: {"threshold", "values": [[step, value]], "thresholds": [[step, t]]}},
        "fired": {name: step}, "first_heldout_drop": step or None}``.

    """
    import datasets
    import trl
    import yaml

    from evalsi.monitors import Monitor, heldout_comparison
    from evalsi.rewards.trl import reward_funcs
    from evalsi.training import CheckpointEvaluator, Transformers
    from evalsi.training.callback import evalsi_callback

    directory.mkdir(parents=True, exist_ok=True)
    reward = directory / f"{kind}-reward.yaml"
    reward.write_text(yaml.safe_dump(reward_spec(kind)))
    model, tokenizer = tiny_model(directory / "model")
    monitor = Monitor()
    funcs, weights = reward_funcs(reward, monitor=monitor, max_completion_length=MAX_TOKENS)
    evaluator = CheckpointEvaluator(
        heldout_spec(directory),
        training_run=f"monitors-{kind}",
        serving=Transformers(max_tokens=MAX_TOKENS),
        log_dir=directory / "evalsi-logs",
    )
    args = trl.GRPOConfig(
        output_dir=str(directory / "out"),
        per_device_train_batch_size=16,
        num_generations=8,
        max_completion_length=MAX_TOKENS,
        max_steps=steps,
        logging_steps=1,
        learning_rate=2e-2,
        report_to="none",
        use_cpu=True,
        save_strategy="steps",
        save_steps=save_steps,
        reward_weights=weights,
        seed=0,
        bf16=False,
        disable_tqdm=True,
    )
    rows = {"prompt": TRAIN_PROMPTS * 16, "answer": ["4"] * 2 * 16}
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=args,
        train_dataset=datasets.Dataset.from_dict(rows),
        processing_class=tokenizer,
        callbacks=[evalsi_callback(evaluator, monitor=monitor, wait=True, before_training=True)],
    )
    trainer.train()

    history = trainer.state.log_history
    reward_key = f"rewards/{kind}/mean"
    curves: dict[str, Any] = {
        "run": kind,
        "reward": [[e["step"], e[reward_key]] for e in history if reward_key in e],
        "monitors": {},
        "fired": dict(monitor.fired),
    }
    for name in SHOWN:
        values = [[e["step"], e[f"monitor/{name}"]] for e in history if f"monitor/{name}" in e]
        thresholds = [[e["step"], e[f"monitor/{name}/threshold"]] for e in history if f"monitor/{name}/threshold" in e]
        curves["monitors"][name] = {"values": values, "thresholds": thresholds}
    base_step, base = monitor.heldout[0]
    heldout = []
    for step, values in monitor.heldout:
        diff = heldout_comparison(base, values).difference
        heldout.append(
            {
                "step": step,
                "mean": _mean(values),
                "difference": diff.mean,
                "ci_low": diff.ci_low,
                "ci_high": diff.ci_high,
                "below_base": step != base_step and diff.ci_high < 0,
            }
        )
    curves["heldout"] = heldout
    curves["first_heldout_drop"] = next((h["step"] for h in heldout if h["below_base"]), None)
    return curves


def _mean(values: dict[str, list[float]]) -> float:
    flat = [v for samples in values.values() for v in samples]
    return sum(flat) / len(flat) if flat else math.nan


def plot(runs: list[dict[str, Any]], path: Path) -> Path:
    """Draw each run's curves (a column per run) to ``path`` (PNG) with matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = 2 + len(SHOWN)
    fig, axes = plt.subplots(rows, len(runs), figsize=(5.5 * len(runs), 1.9 * rows), sharex=True, squeeze=False)
    for column, run in enumerate(runs):
        first = min((s for n, s in run["fired"].items() if n != "reward_vs_heldout" and s is not None), default=None)
        ax = axes[0][column]
        ax.plot(*zip(*run["reward"], strict=True), color="tab:blue")
        ax.set_title(f"{run['run']} reward")
        ax.set_ylabel("train reward")
        ax = axes[1][column]
        points = run["heldout"]
        steps = [p["step"] for p in points]
        ax.plot(steps, [p["mean"] for p in points], marker="o", color="tab:green")
        for p in points:
            if p["below_base"]:
                ax.plot([p["step"]], [p["mean"]], marker="v", color="tab:red", markersize=9)
        ax.set_ylabel("held-out\nbrief")
        for row, name in enumerate(SHOWN, start=2):
            ax = axes[row][column]
            monitor = run["monitors"][name]
            if monitor["values"]:
                ax.plot(*zip(*monitor["values"], strict=True), color="tab:purple", label=name)
            if monitor["thresholds"]:
                ax.plot(*zip(*monitor["thresholds"], strict=True), color="tab:red", linestyle="--", label="threshold")
            fired = run["fired"].get(name)
            if fired is not None:
                ax.axvline(fired, color="tab:orange", linewidth=1)
            ax.set_ylabel(name.replace("_", "\n", 1), fontsize=8)
        for ax in axes[:, column]:
            if first is not None:
                ax.axvline(first, color="tab:orange", linestyle=":", linewidth=1.5)
            if run["first_heldout_drop"] is not None:
                ax.axvline(run["first_heldout_drop"], color="tab:red", linestyle=":", linewidth=1.5)
        axes[-1][column].set_xlabel(
            f"step (orange: first monitor fired, {first}; red: held-out below base, {run['first_heldout_drop']})",
            fontsize=8,
        )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Train both runs (or redraw saved curves), write ``monitor-curves.json`` and, with matplotlib, the PNG."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--output-dir", type=Path, default=Path("monitor-out"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--save-steps", type=int, default=2)
    parser.add_argument("--plot-only", type=Path, help="redraw the PNG from a monitor-curves.json")
    args = parser.parse_args(argv)
    if args.plot_only is not None:
        runs = json.loads(args.plot_only.read_text())
        print(plot(runs, args.plot_only.with_suffix(".png")))
        return list(runs)
    runs = [train(kind, args.output_dir / kind, args.steps, args.save_steps) for kind in RUNS]
    args.output_dir.mkdir(parents=True, exist_ok=True)
    saved = args.output_dir / "monitor-curves.json"
    saved.write_text(json.dumps(runs, indent=1))
    for run in runs:
        print(f"{run['run']}: monitors fired {run['fired']}; held-out first below base at {run['first_heldout_drop']}")
    try:
        print(plot(runs, saved.with_suffix(".png")))
    except ModuleNotFoundError:
        print(f"wrote {saved} (pip install matplotlib, then --plot-only {saved}, to draw it)")
    return runs


if __name__ == "__main__":
    main()
