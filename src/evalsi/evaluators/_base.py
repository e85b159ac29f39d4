"""The `Evaluator` base class every evaluator derives from.

An evaluator declares its name, a pydantic params model (unknown params are an error), which record fields it
reads (they make its cache key), whether it runs code, and scores records. Most evaluators implement
:meth:`Evaluator.score` for one record; those that gain from batching (served models, sandboxes) override
:meth:`Evaluator.score_batch`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from evalsi._util.docstrings import describe_fields
from evalsi.evaluators._operator import ServerResource
from evalsi.evaluators._score import Score
from evalsi.records import Record


class Params(BaseModel):
    """Base of every params model: frozen, and unknown params are rejected rather than ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Describe the new model's fields by their docstrings (its schema is built on first use, with them)."""
        super().__pydantic_init_subclass__(**kwargs)
        describe_fields(cls)


class NoParams(Params):
    """For evaluators that take no params."""


P = TypeVar("P", bound=Params)


@dataclass(frozen=True, slots=True)
class ScoreContext:
    """What an evaluator knows about the call it is scoring for."""

    component: str = ""
    """The component's name in the spec (for messages and metrics)."""
    cancelled: threading.Event | None = None
    """Set once the caller went away (a server client disconnected): an evaluator waiting on an upstream may
    stop early and return error scores for what it did not score. None when the call cannot be cancelled."""


class Evaluator(Generic[P]):
    """Base class of evaluators. Subclasses set the class attributes and implement ``score`` or ``score_batch``."""

    name: ClassVar[str]
    """The registered name, used as a component's ``ref``."""
    summary: ClassVar[str]
    """One line: what it checks."""
    params_model: ClassVar[type[Params]] = NoParams
    reads: ClassVar[tuple[str, ...]] = ("completion",)
    """Record fields the score depends on (``completion``, ``prompt``, ``reference``, ``completion_tokens``,
    ``metadata`` or ``metadata.<key>``): together with the params they make the cache key."""
    scope: ClassVar[Literal["record", "dataset", "group"]] = "record"
    """``group``: a rollout's score depends on the other rollouts of its group (see
    :class:`evalsi.evaluators.GroupEvaluator`); such scores are neither cached nor shared between identical rollouts."""
    cache_version: ClassVar[str] = ""
    """Changed when the evaluator's verdict on the same inputs changes, so that persisted score caches (the
    server's shared cache) do not serve scores of the earlier version; part of every cache key when set."""
    runs_code: ClassVar[bool] = False
    """Code-running evaluators take ``min_isolation`` and run on the sandbox pool."""
    pack: ClassVar[str] = "core"
    server_resource: ClassVar[ServerResource | None] = None
    """On an evalsi server: the kind of operator-configured resource a component names instead of giving the
    params marked ``OPERATOR_ONLY`` (see :mod:`evalsi.evaluators._operator`)."""
    ref_argument: ClassVar[str | None] = None
    """When set, a component's ``ref`` may carry an argument after a slash (``evaluation-test/module::test``);
    it becomes the param of this name."""
    in_process_only: ClassVar[bool] = False
    """Runs code or reads files the spec names (not sandboxed): usable in-process only, refused by the server."""

    def parse_params(self, raw: dict[str, Any] | None) -> P:
        """Validate raw params; raises pydantic's ``ValidationError`` naming each bad field.

        Args:
            raw: The component's ``params`` as written (None for none).

        """
        return self.params_model.model_validate(raw or {})  # type: ignore[return-value]

    def cache_fields(self, params: P) -> tuple[str, ...]:
        """The record fields a score with these params depends on; they make the cache key.

        The default is :attr:`reads`. Override it when params decide what is read (a judge template that shows
        only some fields, a score read from a named field), so records that differ elsewhere share a cached score.

        Args:
            params: The component's validated params.

        """
        return self.reads

    def score(self, record: Record, params: P, ctx: ScoreContext) -> Score:
        """Score one record. Exceptions become ``error`` scores in ``score_batch``.

        Args:
            record: The record to score.
            params: The component's validated params.
            ctx: Per-call context (cancellation, deadlines, the pools to use).

        """
        raise NotImplementedError(f"{type(self).__name__} implements neither score nor score_batch")

    def score_batch(self, records: Sequence[Record], params: P, ctx: ScoreContext) -> list[Score]:
        """Score records in order; one record's exception is that record's error, not the batch's.

        Args:
            records: The records to score.
            params: The component's validated params.
            ctx: Per-call context (cancellation, deadlines, the pools to use).

        """
        out: list[Score] = []
        for record in records:
            try:
                out.append(self.score(record, params, ctx))
            except Exception as exc:  # a failed sample is data
                out.append(Score.error(f"{type(exc).__name__}: {exc}"))
        return out

    def close(self) -> None:
        """Release pools and clients this evaluator holds (worker processes, HTTP clients)."""
