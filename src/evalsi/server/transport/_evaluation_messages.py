"""The evaluation services' plain answers written as ``evaluation.proto``'s messages (transport's job alone)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, TypeVar

from google.protobuf.message import Message

from evalsi.server._convert import message_dict
from evalsi.server._proto.evalsi.v1alpha1 import evaluation_pb2 as pb
from evalsi.server.evaluation._datasets import Dataset
from evalsi.server.evaluation._ids import timestamp
from evalsi.server.evaluation._pages import Page
from evalsi.server.evaluation.evaluators._service import BuildLog, Evaluator
from evalsi.server.evaluation.jobs._generation import PARAMS_PATH
from evalsi.server.evaluation.jobs._service import EvaluationJob, JobSpec

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

M = TypeVar("M", bound=Message)


def dataset(value: Dataset) -> pb.Dataset:
    """A dataset as its message (``jsonl`` empty unless its rows were asked for)."""
    return _resource(pb.Dataset, value, f"datasets/{value.dataset_id}")


def datasets(value: Page[Dataset]) -> pb.ListDatasetsResponse:
    """A page of datasets as its message."""
    return pb.ListDatasetsResponse(datasets=[dataset(d) for d in value.items], next_page_token=value.next_page_token)


def evaluator(value: Evaluator) -> pb.Evaluator:
    """An evaluator as its message."""
    return _resource(pb.Evaluator, value, f"evaluators/{value.evaluator_id}")


def evaluators(value: Page[Evaluator]) -> pb.ListEvaluatorsResponse:
    """A page of evaluators as its message."""
    return pb.ListEvaluatorsResponse(
        evaluators=[evaluator(e) for e in value.items], next_page_token=value.next_page_token
    )


def build_log(value: BuildLog) -> pb.EvaluatorBuildLog:
    """An evaluator's build log as its message."""
    return pb.EvaluatorBuildLog(evaluator_id=value.evaluator_id, state=value.state, log=value.log)


def job_spec(message: pb.EvaluationJob) -> JobSpec:
    """What a ``CreateEvaluationJob`` asks for, as plain data.

    Raises:
        ServiceError: ``invalid_argument`` for completion params holding a number that is infinite or NaN.

    """
    has_params = message.HasField("completion_params")
    return JobSpec(
        evaluator=message.evaluator,
        input_dataset=message.input_dataset,
        output_dataset=message.output_dataset,
        target=message.target,
        completion_params=message_dict(message.completion_params, PARAMS_PATH) if has_params else None,
    )


def job(value: EvaluationJob) -> pb.EvaluationJob:
    """A job as its message."""
    message = pb.EvaluationJob(
        name=f"evaluationJobs/{value.job_id}",
        evaluator=f"evaluators/{value.evaluator_id}",
        input_dataset=f"datasets/{value.input_dataset}",
        output_dataset=f"datasets/{value.output_dataset}",
        state=value.state,
        message=value.message,
        metrics=value.metrics,
        create_time=timestamp(value.created_at),
        update_time=timestamp(value.updated_at),
        target=value.target,
    )
    if value.completion_params:
        message.completion_params.update(value.completion_params)
    if value.output_stats:
        message.output_stats.CopyFrom(pb.OutputStats(**value.output_stats))
    return message


def jobs(value: Page[EvaluationJob]) -> pb.ListEvaluationJobsResponse:
    """A page of jobs as its message."""
    return pb.ListEvaluationJobsResponse(
        evaluation_jobs=[job(j) for j in value.items], next_page_token=value.next_page_token
    )


_TIMES = {"created_at": "create_time", "updated_at": "update_time"}
"""An answer's times (seconds since the epoch) and the message fields that carry them (RFC 3339)."""


def _resource(kind: type[M], value: DataclassInstance, name: str) -> M:
    """The message of a resource the service answered: its resource ``name``, then each field of the answer.

    A field goes into the message field of the same name, but its times, written as RFC 3339; a field the message
    lacks is refused (``ValueError``), never dropped.
    """
    fields: dict[str, object] = {"name": name}
    for field in dataclasses.fields(value):
        answered = getattr(value, field.name)
        fields[_TIMES.get(field.name, field.name)] = timestamp(answered) if field.name in _TIMES else answered
    return kind(**fields)
