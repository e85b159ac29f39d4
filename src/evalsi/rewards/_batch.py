"""Trainer batches -> rollout mappings, and RewardResults -> the plain numbers trainers take.

Every adapter (TRL, verl, OpenRLHF, the reward server) turns what its trainer hands over into rollout mappings
here, so :func:`evalsi.records.from_rollout` sees one shape whatever the trainer, and reads the results back
with the same two projections.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from evalsi.evaluators import Score
from evalsi.rewards._compose import ComponentRule, RewardResult
from evalsi.rewards._skips import SKIPPED_SUFFIX

TRL_RESERVED = frozenset(
    {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}
)
"""Keywords TRL passes that are not dataset columns."""

END_MARKERS: tuple[str, ...] = (
    "<|im_end|>",
    "<|endoftext|>",
    "</s>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<end_of_turn>",
    "<eos>",
    "<|end|>",
    "<|eom_id|>",
    "<|return|>",
    "<｜end▁of▁sentence｜>",
    "<pad>",
    "<|pad|>",
    "<|finetune_right_pad_id|>",
)
"""End-of-sequence and padding tokens a decoded OpenRLHF query may end with (it is decoded with
``skip_special_tokens=False``); they are not part of what the model wrote."""

_FRAMES_KEPT = 16

_SCALARS = frozenset({str, int, float, bool, type(None)})

Batch = dict[str, list[Any]]
"""A batch by columns: ``{"prompt": [...], "completion": [...], "answer": [...], ...}``, all of one length."""


def trl_batch(prompts: Sequence[Any] | None, completions: Sequence[Any] | None, kwargs: Mapping[str, Any]) -> Batch:
    """The columns of one TRL reward call: prompts, completions, completion ids and every dataset column.

    Extras that are not per-rollout lists (``trainer_state``, ``log_extra``, ``log_metric``, ``environments``,
    scalars, lists of another length) are left out.

    Raises:
        ValueError: No completions were passed.

    """
    if completions is None:
        raise ValueError("a reward function needs `completions` (TRL passes prompts=, completions=, ...)")
    count = len(completions)
    batch: Batch = {"completion": completions if isinstance(completions, list) else list(completions)}
    if prompts is not None and len(prompts) == count:
        batch["prompt"] = prompts if isinstance(prompts, list) else list(prompts)
    ids = kwargs.get("completion_ids")
    if isinstance(ids, list) and len(ids) == count:
        batch["completion_ids"] = ids
    for key, value in kwargs.items():
        if key not in TRL_RESERVED and isinstance(value, list) and len(value) == count:
            batch[key] = value
    return batch


def rows(batch: Batch) -> list[dict[str, Any]]:
    """Transpose a batch by columns into one rollout mapping per row."""
    keys = list(batch)
    # Columns are aligned by construction (trl_batch keeps only lists of the batch's length).
    return [dict(zip(keys, values)) for values in zip(*batch.values())]  # noqa: B905


def same_batch(a: Batch, b: Batch) -> bool:
    """Whether two batches hold the same columns with equal values.

    List ``==`` checks identity first, so the same objects passed twice cost one pointer check per row.
    """
    if a.keys() != b.keys():
        return False
    return all(a[key] == b[key] for key in a)


def plain(value: Any) -> Any:
    """``value`` with numpy arrays and scalars (anything with ``tolist``) as Python lists and numbers.

    Recursive, so test cases read from parquet reach evaluators (and JSON) as plain data.
    """
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict or isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [plain(v) for v in value]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return plain(tolist())
    return value


def completion_after_prompt(query: str, prompt: str | None) -> str:
    """What the model wrote in an OpenRLHF query: the text after its prompt, without end-of-sequence tokens.

    OpenRLHF decodes prompt + response tokens together, so the prompt is normally a prefix of the query; when a
    tokenizer round trip changed it (a BOS token in front), the text after its first occurrence is used, and
    when it cannot be found at all the whole query is the completion.
    """
    text = query
    if prompt:
        if text.startswith(prompt):
            text = text[len(prompt) :]
        else:
            at = text.find(prompt)
            if at >= 0:
                text = text[at + len(prompt) :]
    return strip_end_markers(text)


def strip_end_markers(text: str) -> str:
    """Remove trailing end-of-sequence and padding tokens (repeated, and whitespace after them).

    Text the model wrote before them, trailing whitespace included, stays as written.
    """
    while True:
        stripped = text.rstrip()
        if not stripped.endswith(END_MARKERS):  # one C-level check for the common case
            return text
        for marker in END_MARKERS:
            if stripped.endswith(marker):
                text = stripped[: -len(marker)]
                break


def totals(results: Sequence[RewardResult]) -> list[float | None]:
    """The total of each rollout, None where the spec gives none (``onError: none``)."""
    return [r.total for r in results]


def component_values(results: Sequence[RewardResult], name: str) -> list[float | None]:
    """One component's value per rollout: a number when it scored, None when it was skipped or errored.

    A rollout without a total reports None for every component too, so a trainer that sums weighted functions
    (TRL with weight 0 per component) sees a row it cannot score rather than a sum of zeros.
    """
    out: list[float | None] = []
    append = out.append
    for result in results:
        score = result.components[name]
        value = score.value
        # an ok score always has a value; pass/fail counts as 1.0 or 0.0
        append(float(value) if value is not None and score.status == "ok" and result.total is not None else None)
    return out


VECTOR_PREFIX = "reward/"
"""``reward/<component>``: a component's value as composition counts it, for per-component normalisation."""
WEIGHT_PREFIX = "reward_weight/"
"""``reward_weight/<component>``: the component's weight in the spec."""
LATENCY_KEY = "reward/latency_ms"
"""Milliseconds the adapter spent scoring the call that held the rollout (the rollout waited that long)."""


def vector_values(results: Sequence[RewardResult], name: str, skipped: float | None) -> list[float | None]:
    """One component's entry of the reward vector per rollout: what it adds to the total, before its weight.

    Gates and error policies apply exactly as to the total: a gated rollout reads 0.0 in every component (the
    total is the floor), an error under ``onError: zero`` reads 0.0, and a rollout without a total
    (``onError: none``) reads None in every component. A skipped component adds nothing: it reads ``skipped``
    (None for TRL, which excludes it from the group's statistics; 0.0 for trainers that average plainly).
    Pass/fail reads 1.0 or 0.0.
    """
    out: list[float | None] = []
    for result in results:
        score = result.components[name]
        if result.total is None:
            out.append(None)
        elif result.status == "gated" or score.status == "error":
            out.append(0.0)
        elif score.status == "skipped":
            out.append(skipped)
        else:
            out.append(score.numeric or 0.0)
    return out


class PlainNumbers:
    """The numbers verl and OpenRLHF log per rollout, for trainers that average what they are given.

    For each rollout, in order: each component's value (0.0 where it was skipped or errored; pass/fail reads 1.0
    or 0.0), each ``<component>_skipped`` (1.0 when skipped: its mean is the fraction skipped), then for each rule
    the reward vector ``reward/<component>`` (as :func:`vector_values`, skipped read as 0.0) and
    ``reward_weight/<component>``: the weight repeats on every rollout so a trainer normalising each component
    within its group can weight them without reading the spec. The keys are worked out once (see
    :func:`plain_numbers`): per-sample trainers call once per rollout.
    """

    def __init__(self, components: Sequence[str], rules: Sequence[ComponentRule] = ()) -> None:
        """Lay out the keys of a spec's numbers.

        Args:
            components: Component names in spec order.
            rules: The spec's composition rules; none leaves out the vector and weights.

        """
        self._names = tuple(components)
        at = {name: index for index, name in enumerate(components)}
        self._vector = [(rule.name, at.get(rule.name)) for rule in rules]
        # when every rule is a component (as in a bound spec), the vector is read off the values by index
        self._vector_at = [index for _, index in self._vector if index is not None]
        if len(self._vector_at) != len(self._vector):
            self._vector_at = []
        self._no_vector = [0.0] * len(self._vector)
        self._weights = [rule.weight for rule in rules]
        self.row_keys: tuple[str, ...] = (
            *components,
            *(name + SKIPPED_SUFFIX for name in components),
            *(VECTOR_PREFIX + rule.name for rule in rules),
            *(WEIGHT_PREFIX + rule.name for rule in rules),
        )
        """The keys of :meth:`row_values`, in order; a key named twice (a component called "x_skipped" beside
        "x") is there twice, and a dict built from the pairs keeps its first place and its last value."""
        self.keys = list(dict.fromkeys(self.row_keys))
        """Every key of a row, in order."""
        self._framed: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[tuple[str, ...], dict[str, float]]] = {}

    def framed(self, before: tuple[str, ...], after: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, float]]:
        """:attr:`row_keys` between ``before`` and ``after``, joined once per pair (an adapter's few constants).

        Args:
            before: Keys ahead of the row's (verl's ``score``).
            after: Keys after them (the call's latency and percentiles).

        Returns:
            The keys of ``[*before values, *row_values(result), *after values]`` in order, and a dict of them all
            (each once, at its first place) to copy and fill: a copy holds every key already, so filling it with
            ``update(zip(keys, values))`` never grows it, and makes what ``dict(zip(keys, values))`` would.

        """
        key = (before, after)
        found = self._framed.get(key)
        if found is None:
            if len(self._framed) >= _FRAMES_KEPT:  # a few constants per adapter: more means they vary
                self._framed.clear()
            keys = (*before, *self.row_keys, *after)
            found = self._framed[key] = (keys, dict.fromkeys(keys, 0.0))
        return found

    def row_values(self, result: RewardResult) -> list[float]:
        """The numbers of one rollout, aligned with :attr:`row_keys`: a dict of the pairs is :meth:`row`.

        Args:
            result: The rollout's result.

        Returns:
            Each component's value, each ``<component>_skipped`` flag, the reward vector, the weights.

        """
        scores = result.components
        values: list[float] = []
        skipped: list[float] = []
        for name in self._names:
            score = scores[name]
            status = score.status
            if status == "ok":
                value = score.value
                values.append(0.0 if value is None else float(value))
                skipped.append(0.0)
            else:
                values.append(0.0)
                skipped.append(1.0 if status == "skipped" else 0.0)
        # a rollout without a total, or gated, reads 0.0 in every component; otherwise the entry is the value
        # logged above (an error under onError: zero and a skipped component read 0.0)
        if result.total is None or result.status == "gated":
            vector = self._no_vector
        elif self._vector_at:
            vector = [values[index] for index in self._vector_at]
        else:
            vector = [values[at] if at is not None else _plain_value(scores[name]) for name, at in self._vector]
        return [*values, *skipped, *vector, *self._weights]

    def row(self, result: RewardResult, into: dict[str, float] | None = None) -> dict[str, float]:
        """The numbers of one rollout, by key (in the order of :attr:`keys`).

        Args:
            result: The rollout's result.
            into: A dict to add them to (after what it holds); a new one when None.

        Returns:
            ``{<component>: value, <component>_skipped: flag, reward/<component>: entry, reward_weight/...}``.

        """
        pairs = zip(self.row_keys, self.row_values(result), strict=True)
        if into is None:
            return dict(pairs)
        into.update(pairs)
        return into

    def columns(
        self, results: Sequence[RewardResult], shared: Mapping[str, float] | None = None
    ) -> dict[str, list[float]]:
        """The numbers of every rollout, one list per key (in the order of :attr:`keys`), aligned with ``results``.

        Args:
            results: One result per rollout.
            shared: Values the same for every rollout (a call's latency...), each repeated as a column after them.

        Returns:
            One list of floats per key.

        """
        if len(results) == 1:  # a per-sample trainer's call
            single = {key: [value] for key, value in zip(self.row_keys, self.row_values(results[0]), strict=True)}
            for key, value in (shared or {}).items():
                single[key] = [value]
            return single
        if results:
            if len(self.keys) == len(self.row_keys):  # each key once: the values are the row's
                rows = zip(*(self.row_values(result) for result in results), strict=True)
            else:
                rows = zip(*(self.row(result).values() for result in results), strict=True)
            out = dict(zip(self.keys, map(list, rows), strict=True))
        else:
            out = {key: [] for key in self.keys}
        for key, value in (shared or {}).items():
            out[key] = [value] * len(results)
        return out


_layouts: dict[tuple[int, int], tuple[Sequence[str], Sequence[ComponentRule], PlainNumbers]] = {}
_LAYOUTS_KEPT = 16
_layouts_lock = threading.Lock()
_NO_LAYOUT: tuple[Sequence[str], Sequence[ComponentRule], PlainNumbers] = ((), (), PlainNumbers(()))
_last_layout = _NO_LAYOUT


def plain_numbers(components: Sequence[str], rules: Sequence[ComponentRule]) -> PlainNumbers:
    """:class:`PlainNumbers` for these lists, laid out once per pair of list objects (a scorer's own).

    A scorer's ``component_names`` and ``rules`` are the same lists on every call (they are read, never changed),
    so the layout is looked up by their identity; the few most recent pairs are kept.

    Args:
        components: Component names in spec order.
        rules: The spec's composition rules.

    Returns:
        The layout of their numbers.

    """
    global _last_layout  # one reference, replaced whole: a thread reads either entry
    found = _last_layout  # a process scores with one spec: the same pair as last time, without hashing
    if found[0] is components and found[1] is rules:
        return found[2]
    key = (id(components), id(rules))
    found = _layouts.get(key, _NO_LAYOUT)
    if found[0] is not components or found[1] is not rules:
        found = (components, rules, PlainNumbers(components, rules))
        with _layouts_lock:  # adapters are called from several threads (OpenRLHF's asyncio.to_thread)
            if len(_layouts) >= _LAYOUTS_KEPT:
                del _layouts[next(iter(_layouts))]
            # holding the lists keeps their ids from being reused while the entry lives
            _layouts[key] = found
    _last_layout = found
    return found[2]


def _plain_value(score: Score) -> float:
    """A component's value in plain numbers: the number it scored (pass/fail 1.0 or 0.0), else 0.0."""
    value = score.value
    return float(value) if value is not None and score.status == "ok" else 0.0
