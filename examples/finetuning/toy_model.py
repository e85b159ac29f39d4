"""A stand-in for a served model, so the run example works with no server and no GPU.

It answers arithmetic word problems from examples/finetuning/math-problems.jsonl: each sample is correct with
a probability set per problem (seeded by the prompt and the sample index, so runs are reproducible), and wrong
samples are off by one. Point the RunSpec's target at a real endpoint (`baseUrl`, `model`) to evaluate a model.
"""

from __future__ import annotations

import hashlib
import re

ANSWERS = {
    "48 of her friends": 72,
    "12 an hour": 10,
    "$100 for a new wallet": 5,
    "Julie is reading a 120-page book": 42,
    "James writes a 3-page letter": 624,
    "Mark has a garden": 35,
    "Albert is wondering": 48,
    "Ken created a care package": 16,
}
SKILL = [0.9, 0.7, 0.5, 0.3, 0.8, 0.6, 0.4, 0.2]


def answer(prompt: str, n: int = 1) -> list[str]:
    """``n`` completions for ``prompt``, each ending in a boxed answer."""
    for position, (key, value) in enumerate(ANSWERS.items()):
        if key in prompt:
            return [_completion(prompt, value, SKILL[position], i) for i in range(n)]
    return ["I do not know. \\boxed{0}"] * n


def _completion(prompt: str, value: int, skill: float, sample: int) -> str:
    digest = hashlib.sha256(f"{prompt}|{sample}".encode()).digest()
    correct = digest[0] / 255 < skill
    shown = value if correct else value + 1
    words = re.findall(r"\d+", prompt)[:2]
    return f"Using {' and '.join(words) or 'the numbers'} we get {shown}.\n\\boxed{{{shown}}}"
