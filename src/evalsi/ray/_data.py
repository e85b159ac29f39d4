"""Offline scoring on Ray Data: a RewardSpec mapped over a JSONL or Parquet file of rollouts, resumable.

The file is cut into shards (:mod:`evalsi.ray._shards`); Ray Data streams the shards through ``map_batches``
to an actor pool of warm scorers (each holds the bound spec, its sandbox fork server and math workers). An
actor reads its shard from the file, scores it, and writes the shard's JSON lines — those of ``evalsi rewards
score``, with the rollout's index in the whole file — atomically to ``<output>.parts/part-NNNNN.jsonl``. When
every shard is written, the parts are joined in order into ``output`` (atomically) and the parts removed. A
rerun after an interruption skips the shards already written (if the input, spec and options are unchanged).
"""

from __future__ import annotations

import importlib
import shutil
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from evalsi._util.atomic import atomic_writer
from evalsi.errors import DataError, EvalsiError, RewardBatchError, SpecError
from evalsi.ray._ray import connect
from evalsi.ray._shards import Shard, fingerprint, group_keys, plan, read_shard
from evalsi.rewards import Reward, from_mapping, load
from evalsi.rewards.wire import result_json

SHARD_ROWS = 4096
"""Rollouts per shard: the unit of parallelism and of resuming."""
MANIFEST = "manifest.json"


class DatasetBatchError(RewardBatchError):
    """A component errored under ``onError: raise`` on a rollout of the file; ``where`` is ``file:line``.

    Args:
        index: The rollout's index in the file.
        component: The component that errored.
        cause: What went wrong.
        where: The rollout's ``file:line``.

    """

    def __init__(self, index: int, component: str, cause: str, where: str) -> None:
        self.where = where
        super().__init__(index, component, cause)


@dataclass
class DatasetReport:
    """What an offline scoring run did."""

    output: Path
    rollouts: int = 0
    shards: int = 0
    resumed: int = 0
    """Shards already written by an earlier run, skipped."""
    statuses: Counter[str] = field(default_factory=Counter)
    """Rollouts by result status (``ok``, ``gated``, ``no_total``) over the shards scored in this run."""


class ShardScorer:
    """A warm scorer of shards (one per Ray Data actor): reads, scores and writes one shard per call."""

    def __init__(self, resource: dict[str, Any], data: str, parts: str, details: bool, imports: Sequence[str]) -> None:
        import importlib

        for module in imports:
            importlib.import_module(module)
        self.reward = from_mapping(resource)
        self.data = Path(data)
        self.parts = Path(parts)
        self.details = details

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, list[Any]]:
        """Score the shards of a Ray Data batch; one summary row per shard (an error is a row too)."""
        out: dict[str, list[Any]] = {"number": [], "rows": [], "statuses": [], "error": []}
        count = len(batch["number"])
        for i in range(count):
            shard = Shard.from_item({key: batch[key][i] for key in batch})
            statuses, error = self._score(shard)
            out["number"].append(shard.number)
            out["rows"].append(shard.rows)
            out["statuses"].append(orjson.dumps(statuses).decode())
            out["error"].append(orjson.dumps(error).decode() if error else "")
        return out

    def _score(self, shard: Shard) -> tuple[dict[str, int], dict[str, Any] | None]:
        try:
            rows, source = read_shard(self.data, shard)
            try:
                records = self.reward.records(rows)
            except DataError as exc:
                raise source.locate(exc) from None
            try:
                results = self.reward.score_records(records)
            except RewardBatchError as exc:
                location = str(source.error(exc.index, "")).rstrip(": ")
                return {}, {
                    "kind": "batch",
                    "index": shard.first + exc.index,
                    "component": exc.component,
                    "cause": exc.cause,
                    "where": location,
                }
        except DataError as exc:
            return {}, {"kind": "data", "message": str(exc)}
        except EvalsiError as exc:
            return {}, {"kind": "other", "message": str(exc)}
        memo: dict[int, Any] = {}
        lines = (
            result_json(result, shard.first + i, record_id=record.id, details=self.details, memo=memo)
            for i, (record, result) in enumerate(zip(records, results, strict=True))
        )
        with atomic_writer(self.parts / part_name(shard.number)) as handle:
            for line in lines:
                handle.write(orjson.dumps(line) + b"\n")
        return dict(Counter(r.status for r in results)), None


def part_name(number: int) -> str:
    """The file name of shard ``number``'s output."""
    return f"part-{number:05d}.jsonl"


def score_dataset(
    spec: str | Path | Reward | Mapping[str, Any],
    data: str | Path,
    output: str | Path,
    *,
    address: str | None = None,
    num_workers: int = 2,
    num_cpus: float = 1.0,
    resources: Mapping[str, float] | None = None,
    shard_rows: int = SHARD_ROWS,
    details: bool = False,
    imports: Sequence[str] = (),
) -> DatasetReport:
    """Score every rollout of a JSONL or Parquet file on Ray Data, writing ``evalsi rewards score``'s JSON lines.

    Args:
        spec: A RewardSpec file, mapping or loaded ``Reward``.
        data: The rollouts: JSONL or Parquet, readable at the same path on every node (a shared file system).
        output: The JSONL results file, written whole at the end, in input order.
        address: The Ray cluster to join when this process is not connected yet.
        num_workers: Scorer actors in Ray Data's actor pool.
        num_cpus: CPUs each actor reserves.
        resources: Ray resources each actor needs.
        shard_rows: Rollouts per shard.
        details: Include each component's details in the output.
        imports: Modules each actor imports first (evaluator packs).

    Returns:
        What was scored, and how many shards an earlier run had finished.

    Raises:
        SpecError: The spec is invalid.
        DataError: The file is missing or a rollout is malformed (names file and line).
        DatasetBatchError: A component errored under ``onError: raise`` (names the rollout by file and line);
            finished shards are kept, so a rerun after fixing the cause resumes.

    """
    if shard_rows < 1:
        raise ValueError("shard_rows must be at least 1")
    reward = spec if isinstance(spec, Reward) else from_mapping(spec) if isinstance(spec, Mapping) else load(spec)
    source, target = Path(data), Path(output)
    resource = reward.to_resource()
    shards = plan(source, shard_rows, group_keys(reward))
    connect(address)  # before anything is written: without Ray, nothing is left behind
    parts = target.with_name(target.name + ".parts")
    done = _finished(parts, fingerprint(source, resource, shard_rows, details))
    todo = [shard for shard in shards if shard.number not in done]
    report = DatasetReport(target, sum(s.rows for s in shards), len(shards), len(shards) - len(todo))
    if todo:
        _run(todo, resource, source, parts, details, report, num_workers, num_cpus, resources, imports)
    _join(parts, len(shards), target)
    shutil.rmtree(parts, ignore_errors=True)
    return report


def _run(
    todo: list[Shard],
    resource: dict[str, Any],
    source: Path,
    parts: Path,
    details: bool,
    report: DatasetReport,
    num_workers: int,
    num_cpus: float,
    resources: Mapping[str, float] | None,
    imports: Sequence[str],
) -> None:
    data_api = importlib.import_module("ray.data")
    context = data_api.DataContext.get_current()
    context.execution_options.preserve_order = True
    items = [shard.to_item() for shard in todo]
    dataset = data_api.from_items(items, override_num_blocks=len(items))
    options: dict[str, Any] = {"num_cpus": num_cpus}
    if resources:
        options["resources"] = dict(resources)
    scored = dataset.map_batches(
        ShardScorer,
        fn_constructor_kwargs={
            "resource": resource,
            "data": str(source.resolve()),
            "parts": str(parts.resolve()),
            "details": details,
            "imports": list(imports),
        },
        batch_size=1,
        concurrency=min(num_workers, len(items)),
        batch_format="default",
        **options,
    )
    for row in scored.iter_rows():
        if row["error"]:
            raise _error(orjson.loads(row["error"]), str(source))
        report.statuses.update(orjson.loads(row["statuses"]))


def _error(error: dict[str, Any], file: str) -> EvalsiError:
    kind = error["kind"]
    if kind == "batch":
        return DatasetBatchError(error["index"], error["component"], error["cause"], error["where"])
    if kind == "data":
        return DataError(error["message"])
    return SpecError(error["message"], file=file)


def _finished(parts: Path, fingerprint_: str) -> set[int]:
    """Shards written by an earlier run for the same input, spec and options; other parts are cleared."""
    manifest = parts / MANIFEST
    if parts.exists():
        try:
            same = orjson.loads(manifest.read_bytes()).get("fingerprint") == fingerprint_
        except (OSError, orjson.JSONDecodeError):
            same = False
        if same:
            return {int(p.name[5:10]) for p in parts.glob("part-*.jsonl")}
        shutil.rmtree(parts)
    parts.mkdir(parents=True)
    with atomic_writer(manifest) as handle:
        handle.write(orjson.dumps({"fingerprint": fingerprint_}))
    return set()


def _join(parts: Path, count: int, target: Path) -> None:
    """Concatenate the parts in shard order into ``target``, atomically."""
    with atomic_writer(target) as handle:
        for number in range(count):
            with (parts / part_name(number)).open("rb") as part:
                shutil.copyfileobj(part, handle)
