from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateEvaluatorRequest(_message.Message):
    __slots__ = ("evaluator_id", "entry", "archive")
    EVALUATOR_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_FIELD_NUMBER: _ClassVar[int]
    evaluator_id: str
    entry: str
    archive: bytes
    def __init__(self, evaluator_id: _Optional[str] = ..., entry: _Optional[str] = ..., archive: _Optional[bytes] = ...) -> None: ...

class GetEvaluatorRequest(_message.Message):
    __slots__ = ("evaluator_id",)
    EVALUATOR_ID_FIELD_NUMBER: _ClassVar[int]
    evaluator_id: str
    def __init__(self, evaluator_id: _Optional[str] = ...) -> None: ...

class Evaluator(_message.Message):
    __slots__ = ("name", "evaluator_id", "entry", "state", "message", "mode", "archive_bytes", "archive_sha256", "create_time", "update_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EVALUATOR_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_BYTES_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_SHA256_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    evaluator_id: str
    entry: str
    state: str
    message: str
    mode: str
    archive_bytes: int
    archive_sha256: str
    create_time: str
    update_time: str
    def __init__(self, name: _Optional[str] = ..., evaluator_id: _Optional[str] = ..., entry: _Optional[str] = ..., state: _Optional[str] = ..., message: _Optional[str] = ..., mode: _Optional[str] = ..., archive_bytes: _Optional[int] = ..., archive_sha256: _Optional[str] = ..., create_time: _Optional[str] = ..., update_time: _Optional[str] = ...) -> None: ...

class EvaluatorBuildLog(_message.Message):
    __slots__ = ("evaluator_id", "state", "log")
    EVALUATOR_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    evaluator_id: str
    state: str
    log: str
    def __init__(self, evaluator_id: _Optional[str] = ..., state: _Optional[str] = ..., log: _Optional[str] = ...) -> None: ...

class ListEvaluatorsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEvaluatorsResponse(_message.Message):
    __slots__ = ("evaluators", "next_page_token")
    EVALUATORS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    evaluators: _containers.RepeatedCompositeFieldContainer[Evaluator]
    next_page_token: str
    def __init__(self, evaluators: _Optional[_Iterable[_Union[Evaluator, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteEvaluatorResponse(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CreateDatasetRequest(_message.Message):
    __slots__ = ("dataset_id", "jsonl")
    DATASET_ID_FIELD_NUMBER: _ClassVar[int]
    JSONL_FIELD_NUMBER: _ClassVar[int]
    dataset_id: str
    jsonl: str
    def __init__(self, dataset_id: _Optional[str] = ..., jsonl: _Optional[str] = ...) -> None: ...

class GetDatasetRequest(_message.Message):
    __slots__ = ("dataset_id", "rows")
    DATASET_ID_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    dataset_id: str
    rows: bool
    def __init__(self, dataset_id: _Optional[str] = ..., rows: _Optional[bool] = ...) -> None: ...

class Dataset(_message.Message):
    __slots__ = ("name", "dataset_id", "row_count", "size_bytes", "source_job", "create_time", "jsonl")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATASET_ID_FIELD_NUMBER: _ClassVar[int]
    ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_JOB_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    JSONL_FIELD_NUMBER: _ClassVar[int]
    name: str
    dataset_id: str
    row_count: int
    size_bytes: int
    source_job: str
    create_time: str
    jsonl: str
    def __init__(self, name: _Optional[str] = ..., dataset_id: _Optional[str] = ..., row_count: _Optional[int] = ..., size_bytes: _Optional[int] = ..., source_job: _Optional[str] = ..., create_time: _Optional[str] = ..., jsonl: _Optional[str] = ...) -> None: ...

class DeleteDatasetResponse(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListDatasetsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListDatasetsResponse(_message.Message):
    __slots__ = ("datasets", "next_page_token")
    DATASETS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    datasets: _containers.RepeatedCompositeFieldContainer[Dataset]
    next_page_token: str
    def __init__(self, datasets: _Optional[_Iterable[_Union[Dataset, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CreateEvaluationJobRequest(_message.Message):
    __slots__ = ("evaluation_job", "evaluation_job_id")
    EVALUATION_JOB_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    evaluation_job: EvaluationJob
    evaluation_job_id: str
    def __init__(self, evaluation_job: _Optional[_Union[EvaluationJob, _Mapping]] = ..., evaluation_job_id: _Optional[str] = ...) -> None: ...

class GetEvaluationJobRequest(_message.Message):
    __slots__ = ("evaluation_job_id",)
    EVALUATION_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    evaluation_job_id: str
    def __init__(self, evaluation_job_id: _Optional[str] = ...) -> None: ...

class ListEvaluationJobsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "state", "evaluator")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EVALUATOR_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    state: str
    evaluator: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., state: _Optional[str] = ..., evaluator: _Optional[str] = ...) -> None: ...

class ListEvaluationJobsResponse(_message.Message):
    __slots__ = ("evaluation_jobs", "next_page_token")
    EVALUATION_JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    evaluation_jobs: _containers.RepeatedCompositeFieldContainer[EvaluationJob]
    next_page_token: str
    def __init__(self, evaluation_jobs: _Optional[_Iterable[_Union[EvaluationJob, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteEvaluationJobResponse(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class EvaluationJob(_message.Message):
    __slots__ = ("name", "evaluator", "input_dataset", "output_dataset", "state", "message", "metrics", "output_stats", "create_time", "update_time", "target", "completion_params")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    EVALUATOR_FIELD_NUMBER: _ClassVar[int]
    INPUT_DATASET_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DATASET_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_STATS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_PARAMS_FIELD_NUMBER: _ClassVar[int]
    name: str
    evaluator: str
    input_dataset: str
    output_dataset: str
    state: str
    message: str
    metrics: _containers.ScalarMap[str, float]
    output_stats: OutputStats
    create_time: str
    update_time: str
    target: str
    completion_params: _struct_pb2.Struct
    def __init__(self, name: _Optional[str] = ..., evaluator: _Optional[str] = ..., input_dataset: _Optional[str] = ..., output_dataset: _Optional[str] = ..., state: _Optional[str] = ..., message: _Optional[str] = ..., metrics: _Optional[_Mapping[str, float]] = ..., output_stats: _Optional[_Union[OutputStats, _Mapping]] = ..., create_time: _Optional[str] = ..., update_time: _Optional[str] = ..., target: _Optional[str] = ..., completion_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class OutputStats(_message.Message):
    __slots__ = ("rows", "scored", "errored", "mean_score", "min_score", "max_score", "generated", "generation_failed")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    SCORED_FIELD_NUMBER: _ClassVar[int]
    ERRORED_FIELD_NUMBER: _ClassVar[int]
    MEAN_SCORE_FIELD_NUMBER: _ClassVar[int]
    MIN_SCORE_FIELD_NUMBER: _ClassVar[int]
    MAX_SCORE_FIELD_NUMBER: _ClassVar[int]
    GENERATED_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FAILED_FIELD_NUMBER: _ClassVar[int]
    rows: int
    scored: int
    errored: int
    mean_score: float
    min_score: float
    max_score: float
    generated: int
    generation_failed: int
    def __init__(self, rows: _Optional[int] = ..., scored: _Optional[int] = ..., errored: _Optional[int] = ..., mean_score: _Optional[float] = ..., min_score: _Optional[float] = ..., max_score: _Optional[float] = ..., generated: _Optional[int] = ..., generation_failed: _Optional[int] = ...) -> None: ...
