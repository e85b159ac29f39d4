"""verl adapter: ``custom_reward_function`` for verl's reward managers.

Configure verl with this file's path (``python -c "import evalsi.rewards.verl as m; print(m.__file__)"``)::

    custom_reward_function:
      path: /path/to/site-packages/evalsi/rewards/verl.py
      name: compute_score              # compute_score_batch with the batch reward manager
      reward_kwargs:
        spec: /path/to/reward.yaml
        server: https://evalsi.example.com   # optional: score through the Reward Service

Each call returns ``{"score": total, <component>: value, <component>_skipped: 1.0 or 0.0, ...}``: verl trains on
``score`` and records the rest (a skipped or errored component reads 0.0 there, since verl averages these keys
plainly; the mean of ``<component>_skipped`` is the fraction skipped, and a component skipped for a whole batch,
or for many rollouts in a row, is warned about once per process). ``extra_info``'s
fields (test cases, ...) reach the rollout, and the data source is kept as ``data_source``. The spec is loaded
once per process. A spec with ``onError: none`` is refused: verl cannot skip a rollout's reward.

For per-component (GDPO-style) normalisation, each dict also holds the reward vector: ``reward/<component>``, the
component's value as composition counts it (a gated rollout reads 0.0 in every component, an error under
``onError: zero`` reads 0.0, a skipped component 0.0), and ``reward_weight/<component>``, its weight in the spec;
so ``sum(reward_weight/c * reward/c)`` is the total before the floor and ``clip``. verl stores every key in
``reward_extra_info`` (``batch.non_tensor_batch``), where an advantage estimator can normalise each
``reward/<component>`` within its group (``uid``) and weight them. ``reward/latency_ms`` is how long the call
that scored the rollout took (the whole batch's scoring with ``compute_score_batch``); ``reward/latency_ms/p50``,
``/p90`` and ``/p99`` are the percentiles of each rollout's own scoring time (what its components took) over the
batch, or over the last 1,024 rollouts the process scored with ``compute_score`` (in-process scoring only).

Training monitors (:mod:`evalsi.monitors`): with ``reward_kwargs.monitor: true`` every dict also holds
``monitor/<signal>``, ``monitor/<signal>/fired`` and ``monitor/<signal>/threshold`` for each signal read from the
rollouts (NaN until it applies; every dict has every key, as verl gathers each key over the batch). The batch
manager's call is one monitored batch; the per-sample managers' rollouts are read ``monitor_batch`` at a time (set
it to the rollouts per step: ``data.train_batch_size × rollout.n``; default 1024). ``monitor_stop_on`` (a list, or
``"monitor:length_drift,monitor:truncation_rate"``) writes ``monitor_stop_file`` when one of them fires. Groups are
the rollouts of one prompt (``extra_info.index``, else the reference), lengths are whitespace-separated words.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from evalsi.errors import SpecError
from evalsi.records import READ_FIELDS, Record, from_rollout
from evalsi.rewards._batch import LATENCY_KEY, PlainNumbers, plain, plain_numbers
from evalsi.rewards._compose import RewardResult
from evalsi.rewards._latency import call_keys, elapsed_ms, latency_percentiles, window_percentiles
from evalsi.rewards._monitoring import AdapterMonitor, adapter_monitor, stop_on_list
from evalsi.rewards._reward import Reward
from evalsi.rewards._scorer import Components, Scorer, checked_scorer
from evalsi.rewards._skips import watch_skips

__all__ = ["compute_score", "compute_score_batch", "rollout"]

_NAN = float("nan")
_SCORE_KEY = ("score",)


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    **reward_kwargs: Any,
) -> dict[str, float]:
    """The per-sample reward function of verl (``NaiveRewardManager``, the reward loop).

    Args:
        data_source: The sample's data source (kept in the rollout as ``data_source``).
        solution_str: The decoded response: the completion.
        ground_truth: The reference.
        extra_info: More fields of the sample (test cases, ids), merged into the rollout.
        **reward_kwargs: ``spec`` (a RewardSpec file; else ``$EVALSI_REWARD_SPEC``), optional ``server``;
            others verl passes (``reward_router_address``, ...) are ignored.

    Returns:
        ``{"score": total, <component>: value, ..., "reward/<component>": value, "reward_weight/<component>":
        weight, "reward/latency_ms": ms}``.

    Raises:
        SpecError: No spec was given, it is invalid, or it can leave a rollout without a total.
        RewardBatchError: A component errored under ``onError: raise``.

    """
    scorer = _scorer(reward_kwargs)
    found = [(data_source, solution_str, ground_truth, extra_info)]
    started = time.perf_counter()
    results = _score(scorer, found)
    latency_ms = elapsed_ms(started)
    watched = _watch(scorer, reward_kwargs, found, results, per_call=False) if reward_kwargs.get("monitor") else None
    return answer(scorer, results, latency_ms, watched)[0]


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
    **reward_kwargs: Any,
) -> list[dict[str, float]]:
    """The batch reward function of verl (``reward_manager.name=batch``): the whole batch in one scoring call.

    Returns one dict per sample, as :func:`compute_score`.

    Args:
        data_sources: Each sample's data source.
        solution_strs: Each decoded response.
        ground_truths: Each reference.
        extra_infos: Each sample's other fields; None when verl passes none.
        **reward_kwargs: As for :func:`compute_score`.

    Raises:
        SpecError: No spec was given, it is invalid, or it can leave a rollout without a total.
        RewardBatchError: A component errored under ``onError: raise``.

    """
    scorer = _scorer(reward_kwargs)
    found = samples(data_sources, solution_strs, ground_truths, extra_infos)
    started = time.perf_counter()
    results = _score(scorer, found)
    latency_ms = elapsed_ms(started)
    watched = _watch(scorer, reward_kwargs, found, results, per_call=True)
    return answer(scorer, results, latency_ms, watched)


Sample = tuple[Any, str, Any, Mapping[str, Any] | None]
"""One verl sample: its data source, decoded response, reference and extra info."""


def samples(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any] | None] | None,
) -> list[Sample]:
    """The columns of a ``compute_score_batch`` call as one :data:`Sample` each (the Ray adapter's too).

    Raises:
        ValueError: The columns differ in length (names the column).

    """
    count = len(solution_strs)
    infos: Sequence[Mapping[str, Any] | None] = extra_infos if extra_infos is not None else [None] * count
    for name, column in (("data_sources", data_sources), ("ground_truths", ground_truths), ("extra_infos", infos)):
        if len(column) != count:
            raise ValueError(f"compute_score_batch: {name} has {len(column)} items for {count} solution_strs")
    return list(zip(data_sources, solution_strs, ground_truths, infos, strict=True))


def answer(
    scorer: Components,
    results: Sequence[RewardResult],
    latency_ms: float,
    monitors: Mapping[str, float] | None = None,
) -> list[dict[str, float]]:
    """The dicts a reward function returns for ``results``, scored by ``scorer`` in ``latency_ms``.

    Skipped components are watched (:func:`~evalsi.rewards._skips.watch_skips`); each dict holds the reward vector,
    the call's latency and its rollouts' latency percentiles, and the monitors' metrics. The Ray adapter
    (``evalsi/ray/verl.py``) answers with it too.
    """
    names = scorer.component_names
    watch_skips(names, results, "verl")
    numbers = plain_numbers(names, scorer.rules)
    if len(results) == 1 and not monitors:  # a per-sample manager's call: its dict's keys are constants
        ranked = window_percentiles(results[0])
        after = call_keys(ranked)
        return _dicts(results, numbers, after, zip(after, (latency_ms, *ranked), strict=False))
    shared = {LATENCY_KEY: latency_ms, **latency_percentiles(results), **(monitors or {})}
    return _dicts(results, numbers, tuple(shared), shared)


DEFAULT_MONITOR_BATCH = 1024
"""Rollouts per monitored batch for verl's per-sample managers when ``monitor_batch`` is not given."""


def _monitor(scorer: Scorer, reward_kwargs: Mapping[str, Any], *, per_call: bool) -> AdapterMonitor | None:
    """The process's monitor for these ``reward_kwargs`` (None unless ``monitor`` is set)."""
    if not reward_kwargs.get("monitor"):
        return None
    batch = reward_kwargs.get("monitor_batch")
    return adapter_monitor(
        spec_of(reward_kwargs),
        {rule.name: rule.weight for rule in scorer.rules},
        stop_on=stop_on_list(reward_kwargs.get("monitor_stop_on")),
        stop_file=reward_kwargs.get("monitor_stop_file") or None,
        batch=None if per_call and batch is None else int(batch or DEFAULT_MONITOR_BATCH),
    )


def _watch(
    scorer: Scorer,
    reward_kwargs: Mapping[str, Any],
    found: Sequence[Sample],
    results: Sequence[RewardResult],
    *,
    per_call: bool,
) -> dict[str, float]:
    """Feed the scored rollouts to the monitor when one is configured; its latest metrics (else nothing)."""
    monitor = _monitor(scorer, reward_kwargs, per_call=per_call)
    if monitor is None:
        return {}
    completions = [solution for _, solution, _, _ in found]
    return monitor.feed(completions, [_group(truth, info) for _, _, truth, info in found], results)


def _group(ground_truth: Any, extra_info: Mapping[str, Any] | None) -> str:
    """A rollout's group: its sample's ``index`` when verl's data carries one, else its reference."""
    if isinstance(extra_info, Mapping) and extra_info.get("index") is not None:
        return f"index:{extra_info['index']}"
    return f"reference:{plain(ground_truth)!r}"


def rollout(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None
) -> dict[str, Any]:
    """One verl sample as a rollout.

    ``extra_info``'s fields come first; the completion, reference and data source win over same-named ones.
    numpy values (parquet columns) become plain lists.

    Args:
        data_source: The sample's data source.
        solution_str: The decoded response: the completion.
        ground_truth: The reference; None for none.
        extra_info: More fields of the sample, if any.

    """
    out: dict[str, Any] = plain(extra_info) if extra_info and isinstance(extra_info, Mapping) else {}
    out["completion"] = solution_str
    out["data_source"] = plain(data_source)
    if ground_truth is not None:
        out["reference"] = plain(ground_truth)
    return out


def _scorer(reward_kwargs: Mapping[str, Any]) -> Scorer:
    return checked_scorer(spec_of(reward_kwargs), reward_kwargs.get("server") or None, "verl")


def _score(scorer: Scorer, found: Sequence[Sample]) -> list[RewardResult]:
    """Score verl samples: as records built directly in this process, as rollout mappings for a server."""
    if isinstance(scorer, Reward):
        return scorer.score_records(_records(found, scorer.spec.spec.reference_field))
    return scorer.score([rollout(*sample) for sample in found])


def _records(found: Sequence[Sample], reference_field: str | None = None) -> list[Record]:
    """Samples as records: what :func:`rollout` then :func:`~evalsi.records.from_rollout` make of them.

    A sample whose ``extra_info`` holds none of the fields ``from_rollout`` reads (``prompt``, ``id``, a
    reference field...) becomes its record directly, without the intermediate mapping: verl's per-sample managers
    call once per rollout, and that detour cost as much as a cached score. Any other sample (a chat completion, a
    ``referenceField`` other than ``reference``) goes through :func:`rollout`, so both ways agree.

    Args:
        found: The samples.
        reference_field: The spec's ``referenceField``, if any.

    Returns:
        One record per sample.

    Raises:
        DataError: A sample is malformed (names its index).

    """
    direct = reference_field is None or reference_field == "reference"
    out: list[Record] = []
    for index, (data_source, solution_str, ground_truth, extra_info) in enumerate(found):
        info = plain(extra_info) if extra_info and isinstance(extra_info, Mapping) else {}
        reference = None if ground_truth is None else plain(ground_truth)
        if (
            direct
            and type(solution_str) is str
            and (reference is not None or ground_truth is None)
            and info.keys().isdisjoint(READ_FIELDS)
        ):
            info["data_source"] = plain(data_source)
            out.append(Record(solution_str, None, reference, None, None, info))
        else:
            sample = rollout(data_source, solution_str, ground_truth, extra_info)
            out.append(from_rollout(sample, reference_field=reference_field, index=index))
    return out


def spec_of(reward_kwargs: Mapping[str, Any]) -> str:
    """The RewardSpec file ``reward_kwargs`` name (``spec``), else ``$EVALSI_REWARD_SPEC``.

    Raises:
        SpecError: Neither is set.

    """
    spec = reward_kwargs.get("spec") or os.environ.get("EVALSI_REWARD_SPEC")
    if not spec:
        raise SpecError(
            "verl: no RewardSpec given; set custom_reward_function.reward_kwargs.spec to a RewardSpec file "
            "(or the EVALSI_REWARD_SPEC environment variable)"
        )
    return str(spec)


def _dicts(
    results: Sequence[RewardResult],
    numbers: PlainNumbers,
    after: tuple[str, ...],
    shared: Mapping[str, float] | Iterator[tuple[str, float]],
) -> list[dict[str, float]]:
    """One verl dict per result: the total as ``score``, its plain numbers, then ``shared``.

    ``shared`` is the same in every dict: the call's latency and percentiles, the monitors' metrics; ``after``
    holds its keys. A mapping for a batch; for one result, its pairs may come as an iterator (read once).
    Component names are never "score" (the spec forbids it).
    """
    blank = numbers.framed(_SCORE_KEY, after)
    out: list[dict[str, float]] = []
    for result in results:
        item = numbers.row(result, blank.copy())  # every key already there: filling it never grows it
        item["score"] = _NAN if result.total is None else result.total
        item.update(shared)
        out.append(item)
    return out
