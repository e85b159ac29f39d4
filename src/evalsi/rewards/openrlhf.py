"""OpenRLHF adapter: ``reward_func`` for ``--reward.remote_url /path/to/evalsi/rewards/openrlhf.py``.

(``--remote_rm_url`` before OpenRLHF 0.10.2; ``python -c "import evalsi.rewards.openrlhf as m; print(m.__file__)"``
prints the path.)

Set ``EVALSI_REWARD_SPEC`` to the RewardSpec file (and ``EVALSI_SERVER`` to score through the Reward Service).
OpenRLHF loads this file by path and calls ``reward_func(queries, prompts, labels)``; each query is the decoded
prompt + response, so the completion is the query after its prompt (end-of-sequence tokens removed), and the
label is the reference. The answer is ``{"rewards", "scores", "extra_logs"}``: the totals twice, and each
component under its own name in ``extra_logs`` (OpenRLHF logs them as ``train/<component>``; a skipped or
errored component reads 0.0 there, since OpenRLHF averages them plainly), with ``<component>_skipped`` beside it
(1.0 when skipped: its mean is the fraction skipped). A component skipped for a whole batch, or for many
rollouts in a row, is warned about once per process. ``extra_logs`` also holds the reward vector for
per-component (GDPO-style) normalisation: ``reward/<component>``, the component's value as composition counts it
(a gated rollout reads 0.0 in every component, an error under ``onError: zero`` 0.0, a skipped component 0.0),
``reward_weight/<component>``, its weight, ``reward/latency_ms``, how long scoring the call took, and
``reward/latency_ms/p50``, ``/p90``, ``/p99``, the percentiles of each rollout's own scoring time over the call
(over the process's last 1,024 rollouts when a call holds one; in-process scoring only) (OpenRLHF logs them as
``train/reward/<component>`` ...). ``evalsi rewards serve`` answers the same over HTTP. A spec with
``onError: none`` is refused: OpenRLHF cannot skip a rollout's reward.

Training monitors (:mod:`evalsi.monitors`): with ``EVALSI_MONITOR=1``, ``extra_logs`` also holds
``monitor/<signal>``, ``monitor/<signal>/fired`` and ``monitor/<signal>/threshold`` for each signal read from the
rollouts (NaN until it applies; every answer has every key, as OpenRLHF gathers each over a step), logged as
``train/monitor/<signal>``. ``EVALSI_MONITOR_BATCH`` is the rollouts per step (``rollout_batch_size ×
n_samples_per_prompt``): OpenRLHF 0.10+ calls once per rollout, so rollouts are read that many at a time; unset,
each call is one batch (OpenRLHF before 0.10 sends a step's rollouts in one call). ``EVALSI_MONITOR_STOP_ON``
(``monitor:length_drift,monitor:truncation_rate``) writes ``EVALSI_MONITOR_STOP_FILE`` when one of them fires.
Groups are the rollouts of one prompt; lengths are whitespace-separated words.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from evalsi.errors import DataError, SpecError
from evalsi.records import Record
from evalsi.rewards._batch import LATENCY_KEY, completion_after_prompt, plain_numbers
from evalsi.rewards._compose import ComponentRule, RewardResult
from evalsi.rewards._environment import EnvironmentValues
from evalsi.rewards._latency import call_keys, elapsed_ms, latency_percentiles, window_percentiles
from evalsi.rewards._monitoring import adapter_monitor, stop_on_list
from evalsi.rewards._reward import Reward
from evalsi.rewards._scorer import Components, checked_scorer
from evalsi.rewards._skips import watch_skips

_NAN = float("nan")

__all__ = ["records", "reward_func", "reward_response", "rollouts"]


def reward_func(
    queries: Sequence[str],
    prompts: Sequence[str] | None = None,
    labels: Sequence[Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """OpenRLHF's file-form reward function.

    Args:
        queries: Decoded prompt + response, one per sample.
        prompts: The prompts, aligned with ``queries``.
        labels: The references (``--data.label_key``), aligned; None when the dataset has none.
        **kwargs: Ignored (room for what newer OpenRLHF versions pass).

    Returns:
        ``{"rewards": totals, "scores": totals, "extra_logs": {component: values}}``, as torch tensors when
        torch is loaded (always, inside OpenRLHF), else lists of floats.

    Raises:
        SpecError: ``EVALSI_REWARD_SPEC`` is not set, the spec is invalid, or it can leave a rollout without
            a total.
        RewardBatchError: A component errored under ``onError: raise``.

    """
    spec, server, monitor_on = _SETTINGS.read()
    spec = _required(spec)
    scorer = checked_scorer(spec, server or None, "OpenRLHF")
    started = time.perf_counter()
    found = records(queries, prompts, labels)
    results = scorer.score_records(found) if isinstance(scorer, Reward) else scorer.score(_mappings(found))
    latency_ms = elapsed_ms(started)
    monitors: dict[str, float] = {}
    if monitor_on and monitor_on.strip().lower() in ("1", "true", "yes", "on"):
        batch = os.environ.get("EVALSI_MONITOR_BATCH", "").strip()
        monitor = adapter_monitor(
            spec,
            {rule.name: rule.weight for rule in scorer.rules},
            stop_on=stop_on_list(os.environ.get("EVALSI_MONITOR_STOP_ON")),
            stop_file=os.environ.get("EVALSI_MONITOR_STOP_FILE") or None,
            batch=int(batch) if batch else None,
        )
        monitors = monitor.feed([r.completion for r in found], [r.prompt for r in found], results)
    return answer(scorer, results, latency_ms, monitors)


def required_spec() -> str:
    """The RewardSpec file ``$EVALSI_REWARD_SPEC`` names (the OpenRLHF reward files score with it).

    Raises:
        SpecError: The variable is not set.

    """
    return _required(_SETTINGS.read()[0])


def _required(spec: str | None) -> str:
    if not spec:
        raise SpecError("OpenRLHF reward_func: set EVALSI_REWARD_SPEC to the RewardSpec file to score with")
    return spec


_SETTINGS = EnvironmentValues("EVALSI_REWARD_SPEC", "EVALSI_SERVER", "EVALSI_MONITOR")
"""What every call reads of the environment (the monitor's other settings are read only when it is on)."""


def answer(
    scorer: Components,
    results: Sequence[RewardResult],
    latency_ms: float,
    monitors: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """What a ``reward_func`` call returns for ``results``, scored by ``scorer`` in ``latency_ms``.

    Skipped components are watched (:func:`~evalsi.rewards._skips.watch_skips`), the rollouts' latency percentiles
    and the monitors' metrics join ``extra_logs``, and the lists are torch tensors when torch is loaded (always,
    inside OpenRLHF). The Ray adapter (``evalsi/ray/openrlhf.py``) answers with it too.
    """
    watch_skips(scorer.component_names, results, "OpenRLHF")
    torch = sys.modules.get("torch")
    tensor = torch.tensor if torch is not None else None
    if len(results) == 1:  # OpenRLHF 0.10+ calls once per rollout: its logs laid out once
        result = results[0]
        ranked = window_percentiles(result)
        after = call_keys(ranked)
        numbers = plain_numbers(scorer.component_names, scorer.rules)
        row = numbers.row(result, numbers.framed((), after).copy())  # every key already there: it never grows
        row.update(zip(after, (latency_ms, *ranked), strict=True))
        if monitors:
            row.update(monitors)
        logs = {key: [value] for key, value in row.items()}
        return _response([_NAN if result.total is None else result.total], logs, tensor)
    return reward_response(
        scorer.component_names,
        results,
        tensor=tensor,
        rules=scorer.rules,
        latency_ms=latency_ms,
        percentiles=latency_percentiles(results),
        monitors=monitors,
    )


def rollouts(
    queries: Sequence[str], prompts: Sequence[str] | None, labels: Sequence[Any] | None
) -> list[dict[str, Any]]:
    """OpenRLHF samples as rollout mappings (for the Reward Service): the :func:`records`, as mappings.

    Args:
        queries: Decoded prompt + response, one per sample.
        prompts: The prompts, aligned with ``queries``; None when OpenRLHF sends none.
        labels: The references, aligned; None when the dataset has none.

    Raises:
        DataError: As for :func:`records`.

    """
    return _mappings(records(queries, prompts, labels))


def _mappings(found: Sequence[Record]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for record in found:
        item: dict[str, Any] = {"completion": record.completion}
        if record.prompt is not None:
            item["prompt"] = record.prompt
        if record.reference is not None:
            item["label"] = record.reference
        out.append(item)
    return out


def records(queries: Sequence[str], prompts: Sequence[str] | None, labels: Sequence[Any] | None) -> list[Record]:
    """OpenRLHF samples as records: the completion is the query after its prompt, the label the reference.

    The label is the reference whatever the spec's ``referenceField``: OpenRLHF has no other field for it.

    Args:
        queries: Decoded prompt + response, one per sample.
        prompts: The prompts, aligned with ``queries``; None when OpenRLHF sends none.
        labels: The references, aligned; None when the dataset has none.

    Raises:
        DataError: The lists differ in length, or a query or prompt is not text (names the sample's index).

    """
    count = len(queries)
    if (prompts is not None and len(prompts) != count) or (labels is not None and len(labels) != count):
        _misaligned(count, prompts, labels)
    out: list[Record] = []
    for index, query in enumerate(queries):
        prompt = None if prompts is None else prompts[index]
        if not isinstance(query, str) or (prompt is not None and not isinstance(prompt, str)):
            raise DataError("query and prompt must be text", index=index)
        out.append(Record(completion_after_prompt(query, prompt), prompt, None if labels is None else labels[index]))
    return out


def _misaligned(count: int, prompts: Sequence[str] | None, labels: Sequence[Any] | None) -> None:
    """Raise for the list whose length is not ``count``, the queries'."""
    if prompts is not None and len(prompts) != count:
        raise DataError(f"prompts has {len(prompts)} items for {count} queries; OpenRLHF sends aligned lists")
    if labels is not None and len(labels) != count:
        raise DataError(f"labels has {len(labels)} items for {count} queries; OpenRLHF sends aligned lists")


def reward_response(
    components: Sequence[str],
    results: Sequence[RewardResult],
    tensor: Any = None,
    *,
    rules: Sequence[ComponentRule] = (),
    latency_ms: float | None = None,
    percentiles: Mapping[str, float] | None = None,
    monitors: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The OpenRLHF answer for ``results``.

    Args:
        components: Component names in spec order.
        results: One result per sample.
        tensor: Wraps each list when given (e.g. ``torch.tensor``).
        rules: The spec's composition rules: when given, the reward vector and weights join ``extra_logs``.
        latency_ms: How long scoring took: when given, ``reward/latency_ms`` joins ``extra_logs``.
        percentiles: ``reward/latency_ms/p50``, ``/p90``, ``/p99`` of the rollouts' own scoring times (see
            :func:`evalsi.rewards._latency.latency_percentiles`): each joins ``extra_logs`` when given.
        monitors: The training monitors' metrics, joined to ``extra_logs`` (one value per sample, all the same).

    Returns:
        ``{"rewards", "scores", "extra_logs"}``.

    """
    rewards = [_NAN if r.total is None else r.total for r in results]
    shared: dict[str, float] = {} if latency_ms is None else {LATENCY_KEY: latency_ms}
    shared.update(percentiles or {})
    shared.update(monitors or {})
    # a skipped or errored component logs 0.0 (see the module docstring)
    return _response(rewards, plain_numbers(components, rules).columns(results, shared), tensor)


def _response(rewards: list[float], logs: dict[str, list[float]], tensor: Any) -> dict[str, Any]:
    """The answer holding ``rewards`` (also as ``scores``) and ``logs``, each list wrapped by ``tensor`` if given."""
    if tensor is None:
        return {"rewards": rewards, "scores": list(rewards), "extra_logs": logs}
    return {
        "rewards": tensor(rewards),
        "scores": tensor(list(rewards)),
        "extra_logs": {name: tensor(values) for name, values in logs.items()},
    }
