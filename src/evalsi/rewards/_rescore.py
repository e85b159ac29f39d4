"""Re-scoring stored rollouts under a new spec, and what changed: verdicts that flipped, and the mean's shift.

The check to run before changing a reward mid-project: which rollouts the new spec judges differently, per
component, with examples, and the change in the mean with a 95% interval paired by rollout (each rollout is
scored twice, so the pairs share their noise).

Scores are reused from the old file where the component's content key is unchanged: the key of the engine's
score cache (evaluator name and ``cache_version``, canonical params, and the values of the record fields it
reads), recorded per rollout by ``evalsi rewards score --keep-rollouts``. A component whose evaluator, version,
params or inputs changed is scored again; one that did not costs nothing. Old errors are never reused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from evalsi.engine import Pools, ScoreCache, record_key
from evalsi.errors import DataError
from evalsi.evaluators import STATUSES, Score
from evalsi.records import Record
from evalsi.rewards._compose import RewardResult
from evalsi.rewards._reward import Reward
from evalsi.rewards._rollout_files import RowSource
from evalsi.stats import PairedComparison, paired_comparison

_SAME = 1e-9
PREVIEW_CHARS = 160
"""How much of a changed rollout's completion an example shows."""

ChangeKind = Literal["changed", "unchanged", "added", "removed"]


@dataclass(frozen=True)
class StoredRollout:
    """A rollout and what the old spec said of it."""

    index: int
    """Its position in the input (the pairing key)."""
    rollout: Mapping[str, Any]
    old: Mapping[str, Score]
    """Old scores by component (or run metric) name."""
    old_total: float | None = None
    old_status: str | None = None
    """The old result's status (``ok``, ``gated``, ``no_total``); None when the source had no totals (a run)."""
    keys: Mapping[str, bytes] = field(default_factory=dict)
    """The old scores' content keys by component, when the source recorded them."""
    id: str | None = None


@dataclass(frozen=True)
class Change:
    """One rollout judged differently: its old and new score (None when absent) and the new reason."""

    index: int
    id: str | None
    old: Score | None
    new: Score | None
    completion: str = ""
    """The start of the rollout's completion (at most :data:`PREVIEW_CHARS` characters)."""

    @property
    def direction(self) -> Literal["up", "down", "status"]:
        """``up`` or ``down`` when both are decided and the value moved; else ``status`` (a status changed)."""
        old, new = self.old, self.new
        if old is not None and new is not None and old.status == "ok" and new.status == "ok":
            before, after = old.numeric or 0.0, new.numeric or 0.0
            if abs(after - before) > _SAME:
                return "up" if after > before else "down"
        return "status"

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "index": self.index,
            "id": self.id,
            "old": _score_json(self.old),
            "new": _score_json(self.new),
            "direction": self.direction,
            "completion": self.completion,
        }


@dataclass
class ComponentDiff:
    """One component (or the total): what changed between the old scores and the new ones."""

    name: str
    kind: ChangeKind
    evaluator: str | None = None
    compared: int = 0
    """Rollouts with both an old and a new score."""
    changes: list[Change] = field(default_factory=list)
    reused: int = 0
    """New scores taken from the old file (content key unchanged) rather than computed."""
    comparison: PairedComparison | None = None
    """New minus old over the rollouts decided both times, paired by rollout."""
    new_mean: float | None = None
    """The mean of the new values over every rollout decided (an added component has only these)."""

    @property
    def up(self) -> int:
        """Rollouts whose value rose."""
        return sum(1 for c in self.changes if c.direction == "up")

    @property
    def down(self) -> int:
        """Rollouts whose value fell."""
        return sum(1 for c in self.changes if c.direction == "down")

    @property
    def status_changes(self) -> int:
        """Rollouts whose status changed (decided, skipped, errored; for the total: ok, gated, no_total)."""
        return sum(1 for c in self.changes if c.direction == "status")

    def to_json(self, examples: int) -> dict[str, Any]:
        """JSON form with the first ``examples`` changes of each direction.

        Args:
            examples: How many changed rollouts to list per direction.

        """
        picked = [c for d in ("down", "up", "status") for c in [x for x in self.changes if x.direction == d][:examples]]
        return {
            "name": self.name,
            "kind": self.kind,
            "evaluator": self.evaluator,
            "compared": self.compared,
            "changed": len(self.changes),
            "up": self.up,
            "down": self.down,
            "statusChanges": self.status_changes,
            "reused": self.reused,
            "meanOld": _clean(self.comparison.mean_a) if self.comparison else None,
            "meanNew": _clean(self.comparison.mean_b) if self.comparison else self.new_mean,
            "difference": self.comparison.difference.to_dict() if self.comparison else None,
            "significant": self.comparison.significant if self.comparison else None,
            "examples": [c.to_json() for c in picked],
        }


@dataclass
class RescoreReport:
    """Every component's diff, the total's, and the new results (in input order)."""

    spec: str
    rollouts: int
    components: list[ComponentDiff]
    total: ComponentDiff | None
    """None when the old scores had no totals (a run's results)."""
    results: list[RewardResult]
    records: list[Record]
    reused: int = 0
    computed: int = 0
    keyed: int = 0
    """Stored rollouts whose old scores came with content keys (only those can be reused)."""

    @property
    def changed_rollouts(self) -> int:
        """Rollouts with at least one component (or total) judged differently."""
        indexes = {c.index for diff in self.components for c in diff.changes if diff.kind == "changed"}
        if self.total is not None:
            indexes |= {c.index for c in self.total.changes}
        return len(indexes)

    @property
    def flip_rate(self) -> float:
        """The share of rollouts judged differently."""
        return self.changed_rollouts / self.rollouts if self.rollouts else 0.0

    def to_json(self, examples: int = 3) -> dict[str, Any]:
        """JSON form (``evalsi rewards rescore --json``).

        Args:
            examples: How many changed rollouts to list per component and direction.

        """
        return {
            "spec": self.spec,
            "rollouts": self.rollouts,
            "changedRollouts": self.changed_rollouts,
            "flipRate": self.flip_rate,
            "reused": self.reused,
            "computed": self.computed,
            "keyed": self.keyed,
            "components": [c.to_json(examples) for c in self.components],
            "total": self.total.to_json(examples) if self.total else None,
        }


def score_keys(reward: Reward, records: Sequence[Record]) -> list[dict[str, str]]:
    """Each record's content key per component (hex): the engine's cache key, kept beside stored scores.

    Args:
        reward: The reward whose components make the keys.
        records: The records.

    """
    keys: list[dict[str, str]] = [{} for _ in records]
    for component in reward.components:
        job = component.job
        for out, record in zip(keys, records, strict=True):
            out[component.name] = record_key(job.key_prefix, record, job.fields).hex()
    return keys


def rescore(reward: Reward, stored: Sequence[StoredRollout], *, pools: Pools | None = None) -> RescoreReport:
    """Score ``stored`` rollouts with ``reward``, reusing old scores whose content key is unchanged, and diff.

    Args:
        reward: The reward to score with.
        stored: The rollouts and their old scores and keys.
        pools: Where components run; by default the reward's component threads.

    Raises:
        DataError: A rollout is malformed (names its index).
        RewardBatchError: A component errored under ``onError: raise``.

    """
    records = reward.records([s.rollout for s in stored])
    seeded = _seed(stored)
    cache = ScoreCache(max_entries=max(1, len(seeded) + len(records) * max(1, len(reward.components))))
    cache.put_many(list(seeded.items()))
    columns = reward.component_scores(records, cache=cache, pools=pools)
    results = reward.compose(columns)
    report = RescoreReport(reward.name, len(stored), [], None, results, list(records))
    report.keyed = sum(1 for s in stored if s.keys)
    previews = [_preview(record.completion_text) for record in records]
    new_names = reward.component_names
    for position, component in enumerate(reward.components):
        job = component.job
        keys = [record_key(job.key_prefix, record, job.fields) for record in records]
        diff = _diff(component.name, columns[position], stored, previews)
        diff.evaluator = component.evaluator.name
        # a group-level component is scored with its group, never from stored scores
        grouped = component.evaluator.scope == "group"
        diff.reused = 0 if grouped else sum(1 for key in keys if key in seeded)
        report.reused += diff.reused
        report.computed += len(keys) - diff.reused
        report.components.append(diff)
    old_names = list(dict.fromkeys(name for s in stored for name in s.old))
    for name in old_names:
        if name not in new_names:
            report.components.append(ComponentDiff(name, "removed"))
    if stored and all(s.old_status is not None for s in stored):
        report.total = _total_diff(results, stored, previews)
    return report


def _seed(stored: Sequence[StoredRollout]) -> dict[bytes, Score]:
    """Old decided and skipped scores by their content key (errors are computed again, as the cache does)."""
    seeded: dict[bytes, Score] = {}
    for item in stored:
        for name, key in item.keys.items():
            score = item.old.get(name)
            if score is not None and score.status != "error":
                seeded[key] = score
    return seeded


def _preview(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…"


def _diff(
    name: str, column: Sequence[Score], stored: Sequence[StoredRollout], previews: Sequence[str]
) -> ComponentDiff:
    present = [s for s in stored if name in s.old]
    diff = ComponentDiff(name, "changed" if present else "added")
    old_values: dict[str, list[float]] = {}
    new_values: dict[str, list[float]] = {}
    for item, new, preview in zip(stored, column, previews, strict=True):
        old = item.old.get(name)
        if old is None:
            continue
        diff.compared += 1
        if _differs(old, new):
            diff.changes.append(Change(item.index, item.id, old, new, preview))
        if old.status == "ok" and new.status == "ok":
            old_values[str(item.index)] = [old.numeric or 0.0]
            new_values[str(item.index)] = [new.numeric or 0.0]
    if present:
        diff.comparison = paired_comparison(old_values, new_values)
        if not diff.changes:
            diff.kind = "unchanged"
    decided = [score.numeric or 0.0 for score in column if score.status == "ok"]
    diff.new_mean = math.fsum(decided) / len(decided) if decided else None
    return diff


def _total_diff(
    results: Sequence[RewardResult], stored: Sequence[StoredRollout], previews: Sequence[str]
) -> ComponentDiff:
    diff = ComponentDiff("total", "changed", compared=len(stored))
    old_values: dict[str, list[float]] = {}
    new_values: dict[str, list[float]] = {}
    for item, result, preview in zip(stored, results, previews, strict=True):
        old = _total_score(item.old_total, item.old_status or "ok")
        new = _total_score(result.total, result.status)
        if _total_differs(old, new):
            diff.changes.append(Change(item.index, item.id, old, new, preview))
        if item.old_total is not None and result.total is not None:
            old_values[str(item.index)] = [item.old_total]
            new_values[str(item.index)] = [result.total]
    diff.comparison = paired_comparison(old_values, new_values)
    if not diff.changes:
        diff.kind = "unchanged"
    return diff


def _total_score(total: float | None, status: str) -> Score:
    """A total as a Score, so it diffs and prints like a component.

    Its status (``ok``, ``gated``, ``no_total``) is the reason.
    """
    if total is None:
        return Score(None, "skipped", status)
    return Score(total, "ok", status)


def _differs(old: Score, new: Score) -> bool:
    if old.status != new.status:
        return True
    if old.status != "ok":
        return False
    if isinstance(old.value, bool) and isinstance(new.value, bool):
        return old.value != new.value
    return abs((old.numeric or 0.0) - (new.numeric or 0.0)) > _SAME


def _total_differs(old: Score, new: Score) -> bool:
    """Totals differ in value, or in status (``ok``, ``gated``, ``no_total``, kept as the reason)."""
    return _differs(old, new) or old.reason != new.reason


def _score_json(score: Score | None) -> dict[str, Any] | None:
    if score is None:
        return None
    return {"value": score.value, "status": score.status, "reason": score.reason}


def _clean(value: float) -> float | None:
    return None if math.isnan(value) else value


def read_scores(rows: Sequence[Mapping[str, Any]], source: RowSource) -> list[dict[str, Any]]:
    """Validate the lines of a scores file (``evalsi rewards score`` output), naming the file and line of a bad one.

    Args:
        rows: The file's lines, parsed.
        source: Where they came from, for error messages.

    Raises:
        DataError: A line lacks ``components`` or has a malformed score.

    """
    out: list[dict[str, Any]] = []
    for position, row in enumerate(rows):
        components = row.get("components")
        if not isinstance(components, Mapping):
            raise source.error(
                position, "not a scores line (expected {index, total, status, components}, as rewards score writes)"
            )
        for name, score in components.items():
            if not isinstance(score, Mapping) or score.get("status") not in STATUSES:
                raise source.error(
                    position, f"components.{name}: expected {{value, status, reason}} with status ok, skipped or error"
                )
        total = row.get("total")
        if total is not None and (isinstance(total, bool) or not isinstance(total, int | float)):
            raise source.error(position, f"total must be a number or null, got {total!r}")
        keys = row.get("keys")
        if keys is not None and not (
            isinstance(keys, Mapping) and all(isinstance(v, str) and _is_hex_key(v) for v in keys.values())
        ):
            raise source.error(position, "keys must map component names to 64-digit hex content keys")
        out.append(dict(row))
    return out


def _is_hex_key(text: str) -> bool:
    if len(text) != 64:
        return False
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True


def stored_from_scores(
    lines: Sequence[Mapping[str, Any]],
    source: RowSource,
    rollouts: Sequence[Mapping[str, Any]] | None = None,
    rollouts_source: RowSource | None = None,
) -> list[StoredRollout]:
    """Stored rollouts from a scores file, with their rollouts from the file or from ``rollouts``.

    The lines carry the rollouts (``--keep-rollouts``), or ``rollouts`` gives them in the same order (the file's
    ``index`` must match each position, and its ``id`` the rollout's).

    Args:
        lines: The scores file's lines.
        source: Where they came from.
        rollouts: The rollouts, when the scores file does not hold them.
        rollouts_source: Where ``rollouts`` came from.

    Raises:
        DataError: A line has no rollout and none is given, or the two files disagree (naming file and line).

    """
    if rollouts is not None and len(rollouts) != len(lines):
        raise DataError(
            f"holds {len(lines)} scores but the rollouts file has {len(rollouts)} rollouts; they must pair one to one",
            file=source.file,
        )
    out: list[StoredRollout] = []
    for position, line in enumerate(lines):
        index = line.get("index", position)
        if index != position:
            raise source.error(position, f"index {index!r} is out of order (expected {position}: lines in input order)")
        rollout: Any
        if rollouts is not None:
            rollout = rollouts[position]
            ids = (line.get("id"), rollout.get("id"))
            if ids[0] is not None and ids[1] is not None and str(ids[0]) != str(ids[1]):
                at = f" ({_where(rollouts_source, position)})" if rollouts_source is not None else ""
                raise source.error(position, f"id {ids[0]!r} does not match the rollout's id {ids[1]!r}{at}")
        else:
            rollout = line.get("rollout")
            if not isinstance(rollout, Mapping):
                raise source.error(
                    position,
                    "has no rollout: give the rollouts (--data ROLLOUTS --old SCORES), or write scores with "
                    "`evalsi rewards score --keep-rollouts`",
                )
        old = {
            str(name): Score(score.get("value"), score["status"], score.get("reason"))
            for name, score in line["components"].items()
        }
        keys = {str(name): bytes.fromhex(value) for name, value in (line.get("keys") or {}).items()}
        total = line.get("total")
        out.append(
            StoredRollout(
                position,
                rollout,
                old,
                None if total is None else float(total),
                str(line.get("status") or "ok"),
                keys,
                None if line.get("id") is None else str(line["id"]),
            )
        )
    return out


def _where(source: RowSource, position: int) -> str:
    """``file:line`` of a row (``file item [i]`` without lines)."""
    if source.lines is not None and position < len(source.lines):
        return f"{source.file}:{source.lines[position]}"
    return f"{source.file} item [{position}]"
