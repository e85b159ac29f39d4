"""What a training monitor reads of a scored trainer batch: an :class:`~evalsi.monitors.Observation`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evalsi.monitors import Observation, verdict_of
from evalsi.rewards._batch import Batch, component_values, totals
from evalsi.rewards._compose import RewardResult


def completion_text(completion: Any) -> str:
    """A completion as text: a string as it is, a conversation's message contents joined by newlines."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return str(completion.get("content", ""))
    if isinstance(completion, Sequence):
        return "\n".join(completion_text(message) for message in completion)
    return str(completion)


def observation(
    batch: Batch,
    results: Sequence[RewardResult],
    component_names: Sequence[str],
    *,
    step: int | None = None,
    max_completion_length: int | None = None,
) -> Observation:
    """The monitor's view of one scored batch.

    Lengths are the completion's token ids when the trainer passed them (else its whitespace-separated words);
    with ``max_completion_length`` a completion that reached it counts as truncated. Groups are runs of equal
    prompts (a GRPO batch repeats each prompt ``num_generations`` times). Each rollout's sandbox verdict is that
    of its first code-running component.

    Args:
        batch: The batch's columns (``completion``, optionally ``prompt`` and ``completion_ids``).
        results: The batch's reward results, in row order.
        component_names: The spec's components, in order.
        step: The trainer's step.
        max_completion_length: The trainer's completion length limit, in tokens.

    Returns:
        The observation of the batch.

    """
    texts = [completion_text(c) for c in batch["completion"]]
    ids = batch.get("completion_ids")
    lengths = [float(len(i)) for i in ids] if ids is not None else [float(len(t.split())) for t in texts]
    truncated = None if max_completion_length is None else [n >= max_completion_length for n in lengths]
    prompts = batch.get("prompt")
    keys: list[object] = list(range(len(texts))) if prompts is None else [_key(p) for p in prompts]
    verdicts: list[str | None] = []
    for result in results:
        verdict = None
        for score in result.components.values():
            verdict = verdict_of(score.status, score.reason, score.details)
            if verdict is not None:
                break
        verdicts.append(verdict)
    return Observation(
        totals=totals(results),
        components={name: component_values(results, name) for name in component_names},
        lengths=lengths,
        texts=texts,
        group_keys=keys,
        truncated=truncated,
        verdicts=verdicts,
        step=step,
    )


def _key(prompt: Any) -> object:
    """A prompt comparable by value (a conversation, a list of dicts, compares as its text)."""
    return prompt if isinstance(prompt, str) else completion_text(prompt)
