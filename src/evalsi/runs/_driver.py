"""The run driver: generate every record's samples, score them through the engine, write and resume results.

Generation runs concurrently (bounded by the target); finished generations queue up for one scorer task that
takes whatever is ready (up to ``batchSize`` records) and scores it on a worker thread with the run's
:class:`~evalsi.rewards.Reward` (``component_scores``: cache, de-duplication, batched evaluator calls). A
scored record is journaled at once, so a killed run resumes from its finished records.

Resuming reuses finished records; a record with an errored score keeps its completions and is scored again
(an outage is not a verdict); records whose generation failed are generated again. Under ``onError: raise``
the run stops at the first errored score, and that record stays unfinished.

A record is taken over only when it was generated the way this run generates: the same target (base URL and
model; for a served checkpoint, the fingerprint of its files and how it is served, since it listens on a new
port each time), sampling, dataset and samples per record. Each record carries that fingerprint
(``generatedBy``). Records generated otherwise make the run refuse to resume (``--restart`` starts over), or with
``replace_stale`` they are generated again, and the run says so (a warning on the ``evalsi.runs`` logger).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from evalsi._util.retry import RetryNotice
from evalsi.evaluators import Score
from evalsi.records import Record, canonical_json
from evalsi.runs._bind import BoundRun
from evalsi.runs._builtin import load_builtin
from evalsi.runs._datasets import Item, load_items
from evalsi.runs._document import RunResult
from evalsi.runs._progress import RunProgress
from evalsi.runs._results import (
    RecordResult,
    ResultsWriter,
    SampleResult,
    describe_parts,
    fingerprint,
    load_resumable,
)
from evalsi.runs._sharding import Scored, Shard, ShardReport, ShardRunner, cut_shards
from evalsi.runs._summary import RunSummary, summarize
from evalsi.runs._targets import Generation, GenerationError, ModelFn, Target, make_target

log = logging.getLogger("evalsi.runs")

SCORE_LINGER_SECONDS = 0.02
"""How long the scorer waits to fill a batch before scoring what it has."""


class ComponentScorer(Protocol):
    """What scores a run's generations: ``Reward.component_scores``'s shape (``evalsi.ray.RewardPool`` has it)."""

    def component_scores(self, records: Sequence[Record]) -> list[list[Score]]:
        """Raw scores indexed ``[component][record]``, in the run's component order.

        Args:
            records: The generations to score, as records.

        """
        ...


RunVerdict = Literal["ok", "failed", "gate failed"]
"""How a run ended, for the caller to act on (the CLI maps it to an exit code)."""


@dataclass
class RunOutcome:
    """What a run did: its results file, summary, and the records it could not finish."""

    path: Path
    summary: RunSummary
    records: list[RecordResult]
    failed: dict[str, str] = field(default_factory=dict)
    """Pairing key -> why generation failed (these records are retried on the next run)."""
    aborted: str | None = None
    """Why the run stopped early (``onError: raise``), if it did."""
    resumed: int = 0
    generated: int = 0
    timings: dict[str, Any] = field(default_factory=dict)
    result: RunResult | None = None
    """The results as written to ``path`` (read them from here rather than from the file)."""

    @property
    def verdict(self) -> RunVerdict:
        """``failed`` (records failed to generate, or the run stopped), ``gate failed``, or ``ok``."""
        if self.failed or self.aborted:
            return "failed"
        return "ok" if self.summary.gates_passed else "gate failed"


def load_run_items(run: BoundRun) -> list[Item]:
    """The records the run evaluates: its dataset, cut to ``numSamples`` when set.

    Args:
        run: The bound run.

    Raises:
        DataError: The dataset cannot be read or mapped.

    """
    dataset = run.body.dataset
    items = load_builtin(dataset, run.base_dir) if dataset.builtin else load_items(dataset, run.base_dir)
    return items if run.body.num_samples < 0 else items[: run.body.num_samples]


def fingerprints(run: BoundRun, target: Target, model: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Hashes of what produced the completions (generation, and its parts) and their scores (scoring).

    The target counts with its base URL and model name; ``model`` (what a served checkpoint is: its files'
    fingerprint, how it is served) stands in for the base URL when given, since a server started for one
    evaluation listens on a new port each time.
    """
    described = dict(target.describe())
    if model is not None or described.get("baseUrl") is None:
        described.pop("baseUrl", None)
    else:
        described["baseUrl"] = str(described["baseUrl"]).rstrip("/")
    generation = _generation(run, described, model)
    dataset = run.body.dataset.model_dump(mode="json")
    scoring = {
        "components": [c.model_dump(mode="json") for c in run.reward.spec.spec.components],
        # The reference column feeds the scores, not the prompts (a record whose prompt changed is regenerated).
        "reference": dataset["fields"].get("reference"),
    }
    parts = {name: fingerprint(value) for name, value in generation.items()}
    return {"generation": fingerprint(generation), "scoring": fingerprint(scoring), "parts": parts}


def _generation(run: BoundRun, target: Mapping[str, Any], model: Mapping[str, Any] | None) -> dict[str, Any]:
    body = run.body
    dataset = body.dataset.model_dump(mode="json")
    dataset["fields"].pop("reference", None)
    generation: dict[str, Any] = {
        "target": dict(target),
        "sampling": body.sampling.model_dump(mode="json"),
        "dataset": dataset,
        "samples": body.samples,
    }
    if model is not None:
        generation["model"] = dict(model)
    return generation


def generated_otherwise(results: Mapping[str, Any], run: BoundRun, model: Mapping[str, Any] | None) -> list[str]:
    """Which of ``model``, ``sampling``, ``dataset`` and ``samples`` differ between a results document and ``run``.

    The target is not compared (a served checkpoint's address is known only once it is served; the run itself
    checks it when it resumes). A file that does not describe its parts differs in nothing this can tell.

    Args:
        results: A results document (an earlier run's).
        run: The bound run about to resume it.
        model: What generates the completions beyond the spec (a checkpoint's fingerprint and serving), if any.

    """
    found = (results.get("fingerprints") or {}).get("parts")
    if not isinstance(found, Mapping):
        return []
    expected = {name: fingerprint(value) for name, value in _generation(run, {}, model).items()}
    return [name for name in ("model", "sampling", "dataset", "samples") if found.get(name) != expected.get(name)]


class Runner:
    """Runs one bound RunSpec; ``await runner.run_async()`` or ``runner.run()``.

    Args:
        run: The bound RunSpec.
        fn: An in-process model standing in for the spec's target.
        target: A target standing in for the spec's.
        progress: Show a progress bar on stderr.
        restart: Discard the results file and journal of an earlier run instead of resuming.
        model: What the target serves, when the caller knows it (a checkpoint's files fingerprint and serving):
            part of what must match for a record to be taken over, in place of the target's base URL.
        replace_stale: Generate again the records an earlier run generated otherwise (another target, model,
            sampling, dataset or samples), saying so, instead of refusing to resume (:class:`ResumeError`).
        checkpoint_seconds: How often the results file is rewritten while the run works.
        scorer: Scores the generations in place of the run's own reward, with its components in the same order
            (``evalsi run --ray``: a reward pool spreading them over a Ray cluster's CPU workers).
        checkpoint: The ``checkpoint`` section of the results (which training run, step and files were evaluated),
            written with them; its ``evaluatedAt`` is set when the run finishes.
        shards: Generate and score the records in shards elsewhere (``evalsi run --ray-shards``:
            ``evalsi.ray.RayShards``, one CPU worker of a Ray cluster each), journaling each shard's records here
            as they arrive; the results file, summary and resuming are an unsharded run's.

    Raises:
        ValueError: ``shards`` is given with ``target`` or ``scorer`` (shards build the spec's target, or ``fn``'s,
            and score with the run's reward in their own processes).

    """

    def __init__(
        self,
        run: BoundRun,
        *,
        fn: ModelFn | None = None,
        target: Target | None = None,
        progress: bool = False,
        restart: bool = False,
        model: Mapping[str, Any] | None = None,
        replace_stale: bool = False,
        checkpoint_seconds: float = 30.0,
        scorer: ComponentScorer | None = None,
        checkpoint: Mapping[str, Any] | None = None,
        shards: ShardRunner | None = None,
    ) -> None:
        if shards is not None and (target is not None or scorer is not None):
            raise ValueError("a sharded run builds its target and scores in its shards: pass no target or scorer")
        self.run_spec = run
        self._shards = shards
        self._checkpoint = dict(checkpoint) if checkpoint is not None else None
        self._scorer: ComponentScorer = scorer if scorer is not None else run.reward
        self._fn = fn
        self._target = target
        self._progress_enabled = progress
        self._restart = restart
        self._model = dict(model) if model is not None else None
        self._replace_stale = replace_stale
        self._generated_by = ""
        self._checkpoint_seconds = checkpoint_seconds
        self._done: dict[str, RecordResult] = {}
        self._failed: dict[str, str] = {}
        self._aborted: str | None = None
        self._scoring_seconds = 0.0
        self._resumed = 0
        self._resumed_outside_journal = 0
        self._generated = 0
        self._bar: RunProgress | None = None

    def _on_retry(self, notice: RetryNotice) -> None:
        """Show an endpoint's retry in the progress line while it waits."""
        if self._bar is not None:
            self._bar.retrying(notice)

    def run(self) -> RunOutcome:
        """Run to completion on a fresh event loop."""
        outcome: list[RunOutcome] = []

        async def main() -> None:
            # Handed back beside the task, not as its result: restoring the Ctrl-C handler, asyncio formats the
            # main task's repr, result included, twice (every record's repr, ~30 ms for a thousand records).
            outcome.append(await self.run_async())

        asyncio.run(main())
        return outcome[0]

    async def run_async(self) -> RunOutcome:
        """Generate, score, journal and summarise every record not finished by an earlier run."""
        run = self.run_spec
        body = run.body
        started, wall = datetime.now(UTC), time.perf_counter()
        items = load_run_items(run)
        target = self._target or make_target(
            body.target, body.sampling, body.dataset.system_prompt, self._fn, self.run_spec.base_dir, self._on_retry
        )
        try:
            writer, todo, rescore = self._resume(items, target)
            writer.begin(len(items), self._resumed_outside_journal)
            try:
                with RunProgress(run.spec.name, len(items), len(self._done), self._progress_enabled) as bar:
                    self._bar = bar
                    journal = _Journal(self, writer, bar)
                    if self._shards is None:
                        await self._pipeline(todo, rescore, target, journal)
                    else:
                        await self._sharded(self._shards, todo, rescore, journal)
            except BaseException:
                # Interrupted: keep the journal (it holds every scored record) and leave a partial results file.
                with contextlib.suppress(Exception):
                    writer.write(self._done.values(), status="partial", extra={})
                writer.close(remove_journal=False)
                raise
        finally:
            await target.aclose()
        timings = {
            "started": started.isoformat(),
            "finished": datetime.now(UTC).isoformat(),
            "wallSeconds": round(time.perf_counter() - wall, 3),
            "scoringSeconds": round(self._scoring_seconds, 3),
        }
        return self._finish(writer, len(items), timings)

    def _resume(self, items: list[Item], target: Target) -> tuple[ResultsWriter, list[Item], list[Scored]]:
        """Open the results writer; take over an earlier run's records (or queue them for rescoring)."""
        run = self.run_spec
        prints = fingerprints(run, target, self._model)
        self._generated_by = prints["generation"]
        header = {
            "name": run.spec.name,
            "spec": run.body.model_dump(mode="json", by_alias=True),
            "target": target.describe(),
            **({"model": self._model} if self._model is not None else {}),
            "fingerprints": prints,
            "metrics": [m.__dict__ for m in run.metrics],
            "onError": run.body.on_error,
            **({"checkpoint": self._checkpoint} if self._checkpoint is not None else {}),
        }
        writer = ResultsWriter(run.output, header)
        if self._restart:
            writer.restart()
        resumed = load_resumable(run.output, prints, replace_stale=self._replace_stale)
        by_key = {item.key: item for item in items}
        previous = _match_previous(items, resumed.records)
        todo = [item for item in items if item.key not in previous]
        # Errored scores are never final (an outage is not a verdict): their completions are scored again; so
        # are records matched by position and prompt after their key changed (a new reference column).
        kept = {k: r for k, r in previous.items() if resumed.scores_valid and r.key == k and not _has_error(r)}
        for record in kept.values():  # taken over: generated the way this run generates
            record.generated_by = self._generated_by
        if resumed.stale:
            log.warning(
                "%s: %d earlier records were generated with different generation settings%s; generating them again",
                run.output,
                resumed.stale,
                describe_parts(resumed.differs),
            )
            # Start the file over with what still holds, so it never mixes two generations' records.
            writer.restart()
            if kept:
                writer.append(kept.values())
        self._done.update(kept)
        self._resumed = len(kept)
        self._resumed_outside_journal = 0 if resumed.stale else len(kept)
        return writer, todo, [(by_key[k], _generations(r)) for k, r in previous.items() if k not in kept]

    def _finish(self, writer: ResultsWriter, total: int, timings: dict[str, Any]) -> RunOutcome:
        """Summarise, write the final results file, and drop the journal it supersedes."""
        body = self.run_spec.body
        records = sorted(self._done.values(), key=lambda r: r.index)
        summary = summarize(records, self.run_spec.metrics, body.pass_k, body.gates, body.on_error)
        complete = not self._failed and self._aborted is None and len(records) == total
        extra: dict[str, Any] = {
            "timings": timings,
            "summary": summary.to_dict(),
            "failed": self._failed,
            "aborted": self._aborted,
        }
        if self._checkpoint is not None:
            extra["checkpoint"] = {**self._checkpoint, "evaluatedAt": timings["finished"]}
        result = writer.write(records, status="complete" if complete else "partial", extra=extra)
        writer.close(remove_journal=True)
        return RunOutcome(
            writer.path,
            summary,
            records,
            dict(self._failed),
            self._aborted,
            resumed=self._resumed,
            generated=self._generated,
            timings=timings,
            result=result,
        )

    async def _sharded(self, shards: ShardRunner, todo: Sequence[Item], rescore: Sequence[Scored], sink: _Sink) -> None:
        """Hand the records to the shards and journal their reports as they arrive."""
        cut = cut_shards(todo, rescore, shards.count)
        if not cut:
            return
        reports = shards.run_shards(self.run_spec, cut, self._generated_by, self._fn)
        async with contextlib.aclosing(reports):
            async for report in reports:
                if report.results:
                    sink.scored(report.results)
                for key, reason in report.failed.items():
                    sink.failed(key, reason)
                self._generated += report.generated
                self._scoring_seconds += report.scoring_seconds
                if report.aborted is not None:  # onError: raise in one shard stops them all
                    self._aborted = report.aborted
                    return

    async def _pipeline(self, todo: Sequence[Item], rescore: Sequence[Scored], target: Target, sink: _Sink) -> None:
        queue: asyncio.Queue[Scored | None] = asyncio.Queue()
        for entry in rescore:  # same completions, changed evaluators: score again without generating
            queue.put_nowait(entry)
        scorer = asyncio.create_task(self._score_loop(queue, sink))
        samples = self.run_spec.body.samples

        async def generate(item: Item) -> None:
            try:
                queue.put_nowait((item, await target.generate(item.prompt, samples)))
                self._generated += 1
            except GenerationError as exc:
                sink.failed(item.key, str(exc))

        workers = [asyncio.create_task(generate(item)) for item in todo]
        generation = asyncio.gather(*workers)
        try:
            waiters: list[asyncio.Future[Any]] = [generation, scorer]
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if scorer not in done:  # every generation is queued: let the scorer drain the queue
                generation.result()
                queue.put_nowait(None)
                await asyncio.wait({scorer})
            error = scorer.exception()
            if error is not None and not isinstance(error, _Abort):
                raise error
        finally:
            for task in (*workers, scorer):
                task.cancel()
            await asyncio.gather(*workers, scorer, return_exceptions=True)
            generation.cancel()
            if not generation.cancelled():  # it holds a worker's CancelledError: retrieve it, or asyncio logs it
                generation.exception()

    async def _score_loop(self, queue: asyncio.Queue[Scored | None], sink: _Sink) -> None:
        batch_size = self.run_spec.body.batch_size
        finished = False
        while not finished:
            first = await queue.get()
            batch = [] if first is None else [first]
            finished = first is None
            # Linger briefly for more generations: each scoring call hands over to a worker thread, and
            # fewer, fuller calls cost the event loop far less than one hand-off per record.
            deadline = time.monotonic() + SCORE_LINGER_SECONDS
            while not finished and len(batch) < batch_size:
                if queue.empty():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    try:
                        entry = await asyncio.wait_for(queue.get(), remaining)
                    except TimeoutError:
                        break
                else:
                    entry = queue.get_nowait()
                finished = entry is None
                if entry is not None:
                    batch.append(entry)
            if batch:
                results = await self._score(batch)
                if self._aborted is not None:  # onError: raise; errored records stay unfinished
                    results = [r for r in results if not _has_error(r)]
                sink.scored(results)
                if self._aborted is not None:
                    raise _Abort(self._aborted)

    async def _score(self, batch: list[Scored]) -> list[RecordResult]:
        records = [_record(item, g) for item, gens in batch for g in gens]
        started = time.perf_counter()
        columns = await asyncio.to_thread(self._scorer.component_scores, records)
        self._scoring_seconds += time.perf_counter() - started
        names = self.run_spec.reward.component_names
        out: list[RecordResult] = []
        position = 0
        for item, gens in batch:
            samples = []
            for g in gens:
                scores = {name: column[position] for name, column in zip(names, columns, strict=True)}
                samples.append(SampleResult(g.text, g.finish_reason, g.tokens, g.latency, scores))
                position += 1
                if self.run_spec.body.on_error == "raise" and self._aborted is None:
                    self._aborted = _first_error(item, scores)
            out.append(
                RecordResult(item.key, item.index, item.prompt, item.reference, item.id, samples, self._generated_by)
            )
        return out


class _Sink(Protocol):
    """Where the pipeline puts what it finishes: scored records, and records whose generation failed."""

    def scored(self, results: list[RecordResult]) -> None: ...

    def failed(self, key: str, reason: str) -> None: ...


class _Journal:
    """The driver's sink: journal scored records, count them on the bar, rewrite the results file now and then."""

    def __init__(self, runner: Runner, writer: ResultsWriter, bar: RunProgress) -> None:
        self.runner = runner
        self.writer = writer
        self.bar = bar
        self.last_checkpoint = time.monotonic()

    def scored(self, results: list[RecordResult]) -> None:
        self.writer.append(results)
        self.runner._done.update((r.key, r) for r in results)
        self.bar.advance(len(results))
        if time.monotonic() - self.last_checkpoint > self.runner._checkpoint_seconds:
            self.writer.write(self.runner._done.values(), status="partial", extra={})
            self.last_checkpoint = time.monotonic()

    def failed(self, key: str, reason: str) -> None:
        self.runner._failed[key] = reason
        self.bar.advance(0, failed=1)


class _Reports:
    """A shard's sink: every scored batch and failed record becomes a report for the driver."""

    def __init__(self, shard: int) -> None:
        self.shard = shard
        self.queue: asyncio.Queue[ShardReport | None] = asyncio.Queue()

    def scored(self, results: list[RecordResult]) -> None:
        self.queue.put_nowait(ShardReport(self.shard, results=results))

    def failed(self, key: str, reason: str) -> None:
        self.queue.put_nowait(ShardReport(self.shard, failed={key: reason}))


async def run_shard(
    run: BoundRun, shard: Shard, generated_by: str, fn: ModelFn | None = None
) -> AsyncGenerator[ShardReport, None]:
    """Generate and score one shard's records with the run's own pipeline, reporting each batch as it is scored.

    The shard builds the spec's target (or ``fn``'s) and scores with the run's reward in this process. Its last
    report carries how many records it generated, its scoring time, and why it stopped under ``onError: raise``.

    Args:
        run: The bound run.
        shard: The shard's records.
        generated_by: The run's generation fingerprint, stamped on every record.
        fn: An in-process model standing in for the spec's target, if any.

    Yields:
        The shard's reports, in the order its records finish.

    """
    runner = Runner(run, fn=fn)
    runner._generated_by = generated_by
    body = run.body
    target = make_target(body.target, body.sampling, body.dataset.system_prompt, fn, run.base_dir)
    sink = _Reports(shard.number)

    async def work() -> None:
        try:
            await runner._pipeline(shard.items, shard.rescore, target, sink)
        finally:
            sink.queue.put_nowait(None)

    task = asyncio.create_task(work())
    try:
        while (report := await sink.queue.get()) is not None:
            yield report
        await task
        yield ShardReport(
            shard.number,
            aborted=runner._aborted,
            generated=runner._generated,
            scoring_seconds=round(runner._scoring_seconds, 6),
        )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await target.aclose()


def _match_previous(items: Sequence[Item], found: dict[str, RecordResult]) -> dict[str, RecordResult]:
    """Earlier records whose completions answer these items: same key and prompt, else same index and prompt.

    The second match keeps the completions of a dataset without ids (whose keys hash the reference) when only
    the reference changed; a record whose prompt changed is never reused.
    """
    by_position = {(r.index, canonical_json(r.prompt)): r for r in found.values()}
    out: dict[str, RecordResult] = {}
    for item in items:
        prompt = canonical_json(item.prompt)
        record = found.get(item.key)
        if record is None or canonical_json(record.prompt) != prompt:
            record = by_position.get((item.index, prompt))
        if record is not None:
            out[item.key] = record
    return out


class _Abort(Exception):
    """``onError: raise`` met an errored score: stop generating, keep what is scored."""


def _first_error(item: Item, scores: dict[str, Any]) -> str | None:
    for name, score in scores.items():
        if score.status == "error":
            return f"record {item.id or item.key} (index {item.index}): {name} errored: {score.reason}"
    return None


def _has_error(record: RecordResult) -> bool:
    return any(score.status == "error" for sample in record.samples for score in sample.scores.values())


def _record(item: Item, generation: Generation) -> Record:
    return Record(
        completion=generation.text,
        prompt=item.prompt,
        reference=item.reference,
        completion_tokens=generation.tokens,
        id=item.id,
        metadata=item.metadata,
    )


def _generations(record: RecordResult) -> list[Generation]:
    return [Generation(s.completion, s.finish_reason, s.tokens, s.latency) for s in record.samples]
