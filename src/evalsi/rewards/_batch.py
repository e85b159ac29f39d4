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
        self._components = [(name, name + SKIPPED_SUFFIX) for name in components]
        at = {name: index for index, name in enumerate(components)}
        self._vector = [(VECTOR_PREFIX + rule.name, rule.name, at.get(rule.name)) for rule in rules]
        self._no_vector = dict.fromkeys([key for key, _, _ in self._vector], 0.0)
        self._weights = {WEIGHT_PREFIX + rule.name: rule.weight for rule in rules}
        # a key named twice (a component called "x_skipped" beside "x") keeps its first place, as in a dict
        every = [*components, *(flag for _, flag in self._components), *self._no_vector]
        self.keys = list(dict.fromkeys([*every, *self._weights]))
        """Every key of a row, in order."""
        self._framed: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[str, float]] = {}
        self._last_frame: tuple[tuple[str, ...], tuple[str, ...], dict[str, float]] = ((), (), {})

    def framed(self, before: tuple[str, ...], after: tuple[str, ...]) -> dict[str, float]:
        """A dict of ``before``, then :attr:`keys`, then ``after``, to copy and fill (laid out once per pair).

        A copy holds every key already, at its place: :meth:`row` fills it without growing it, and the keys
        before and after take their values wherever they are set.

        Args:
            before: Keys ahead of the row's (verl's ``score``).
            after: Keys after them (the call's latency and percentiles, monitors).

        Returns:
            The keys, each once at its first place, all 0.0.

        """
        last = self._last_frame  # per-sample calls pass the same constants every time: no hashing
        if last[0] is before and last[1] is after:
            return last[2]
        key = (before, after)
        found = self._framed.get(key)
        if found is None:
            if len(self._framed) >= _FRAMES_KEPT:  # a few constants per adapter: more means they vary
                self._framed.clear()
            found = self._framed[key] = dict.fromkeys((*before, *self.keys, *after), 0.0)
        self._last_frame = (before, after, found)
        return found

    def row(self, result: RewardResult, into: dict[str, float] | None = None) -> dict[str, float]:
        """The numbers of one rollout, by key (in the order of :attr:`keys`).

        Args:
            result: The rollout's result.
            into: A dict to add them to (after what it holds); a new one when None.

        Returns:
            ``{<component>: value, <component>_skipped: flag, reward/<component>: entry, reward_weight/...}``.

        """
        row: dict[str, float] = {} if into is None else into
        scores = result.components
        values: list[float] = []
        skipped: list[float] = []
        for name, _ in self._components:
            score = scores[name]
            value = score.value
            status = score.status
            values.append(float(value) if value is not None and status == "ok" else 0.0)
            skipped.append(1.0 if status == "skipped" else 0.0)
            row[name] = values[-1]
        for (_, flag), is_skipped in zip(self._components, skipped, strict=True):
            row[flag] = is_skipped
        # a rollout without a total, or gated, reads 0.0 in every component; otherwise the entry is the value
        # logged above (an error under onError: zero and a skipped component read 0.0)
        if result.total is not None and result.status != "gated":
            for key, name, at in self._vector:
                row[key] = values[at] if at is not None else _plain_value(scores[name])
        else:
            row.update(self._no_vector)
        row.update(self._weights)
        return row

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
            row = self.row(results[0])
            if shared:
                row.update(shared)
            return {key: [value] for key, value in row.items()}
        if results:
            blank = self.framed((), ())  # every row a copy of it, filled: none grows
            rows = zip(*(self.row(result, blank.copy()).values() for result in results), strict=True)
            out = dict(zip(self.keys, map(list, rows), strict=True))
        else:
            out = {key: [] for key in self.keys}
        for key, value in (shared or {}).items():
            out[key] = [value] * len(results)
        return out


_layouts: dict[tuple[int, int], tuple[Sequence[str], Sequence[ComponentRule], PlainNumbers]] = {}
_LAYOUTS_KEPT = 16
_FRAMES_KEPT = 16
"""Framed dicts a layout keeps (:meth:`PlainNumbers.framed`): each adapter frames its rows with a few constants."""
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
