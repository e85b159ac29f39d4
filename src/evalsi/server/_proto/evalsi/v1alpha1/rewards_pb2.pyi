from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScoreRewardsRequest(_message.Message):
    __slots__ = ("spec", "rollouts")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    ROLLOUTS_FIELD_NUMBER: _ClassVar[int]
    spec: _struct_pb2.Struct
    rollouts: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Struct]
    def __init__(self, spec: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., rollouts: _Optional[_Iterable[_Union[_struct_pb2.Struct, _Mapping]]] = ...) -> None: ...

class ScoreRewardsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[RewardResult]
    def __init__(self, results: _Optional[_Iterable[_Union[RewardResult, _Mapping]]] = ...) -> None: ...

class RewardResult(_message.Message):
    __slots__ = ("index", "total", "status", "components")
    class ComponentsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ComponentScore
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ComponentScore, _Mapping]] = ...) -> None: ...
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    index: int
    total: float
    status: str
    components: _containers.MessageMap[str, ComponentScore]
    def __init__(self, index: _Optional[int] = ..., total: _Optional[float] = ..., status: _Optional[str] = ..., components: _Optional[_Mapping[str, ComponentScore]] = ...) -> None: ...

class ComponentScore(_message.Message):
    __slots__ = ("value", "status", "reason")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    value: _struct_pb2.Value
    status: str
    reason: str
    def __init__(self, value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CreateRunRequest(_message.Message):
    __slots__ = ("results", "labels", "request_id")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    results: _struct_pb2.Struct
    labels: _containers.ScalarMap[str, str]
    request_id: str
    def __init__(self, results: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("id", "name", "labels", "create_time", "status", "record_count", "spec", "target", "summary", "details")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    labels: _containers.ScalarMap[str, str]
    create_time: str
    status: str
    record_count: int
    spec: _struct_pb2.Struct
    target: _struct_pb2.Struct
    summary: _struct_pb2.Struct
    details: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., create_time: _Optional[str] = ..., status: _Optional[str] = ..., record_count: _Optional[int] = ..., spec: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., target: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., summary: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., details: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("id", "include_records", "page_size", "page_token")
    ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_RECORDS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    id: str
    include_records: bool
    page_size: int
    page_token: str
    def __init__(self, id: _Optional[str] = ..., include_records: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ("run", "records", "next_page_token")
    RUN_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    records: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Struct]
    next_page_token: str
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ..., records: _Optional[_Iterable[_Union[_struct_pb2.Struct, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("labels", "page_size", "page_token")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABELS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.ScalarMap[str, str]
    page_size: int
    page_token: str
    def __init__(self, labels: _Optional[_Mapping[str, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteRunRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DeleteRunResponse(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class CompareRunsRequest(_message.Message):
    __slots__ = ("base_run_id", "candidate_run_id", "metrics", "regression")
    BASE_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    REGRESSION_FIELD_NUMBER: _ClassVar[int]
    base_run_id: str
    candidate_run_id: str
    metrics: _containers.RepeatedScalarFieldContainer[str]
    regression: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, base_run_id: _Optional[str] = ..., candidate_run_id: _Optional[str] = ..., metrics: _Optional[_Iterable[str]] = ..., regression: _Optional[_Iterable[str]] = ...) -> None: ...

class Estimate(_message.Message):
    __slots__ = ("mean", "se", "ci_low", "ci_high", "n", "clusters")
    MEAN_FIELD_NUMBER: _ClassVar[int]
    SE_FIELD_NUMBER: _ClassVar[int]
    CI_LOW_FIELD_NUMBER: _ClassVar[int]
    CI_HIGH_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    mean: float
    se: float
    ci_low: float
    ci_high: float
    n: int
    clusters: int
    def __init__(self, mean: _Optional[float] = ..., se: _Optional[float] = ..., ci_low: _Optional[float] = ..., ci_high: _Optional[float] = ..., n: _Optional[int] = ..., clusters: _Optional[int] = ...) -> None: ...

class McNemarTest(_message.Message):
    __slots__ = ("a_only", "b_only", "p_value")
    A_ONLY_FIELD_NUMBER: _ClassVar[int]
    B_ONLY_FIELD_NUMBER: _ClassVar[int]
    P_VALUE_FIELD_NUMBER: _ClassVar[int]
    a_only: int
    b_only: int
    p_value: float
    def __init__(self, a_only: _Optional[int] = ..., b_only: _Optional[int] = ..., p_value: _Optional[float] = ...) -> None: ...

class Flip(_message.Message):
    __slots__ = ("key", "a", "b", "direction")
    KEY_FIELD_NUMBER: _ClassVar[int]
    A_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    key: str
    a: float
    b: float
    direction: str
    def __init__(self, key: _Optional[str] = ..., a: _Optional[float] = ..., b: _Optional[float] = ..., direction: _Optional[str] = ...) -> None: ...

class MetricComparison(_message.Message):
    __slots__ = ("metric", "mean_a", "mean_b", "difference", "significant", "mcnemar", "pairs", "only_a", "only_b", "flips", "regressed")
    METRIC_FIELD_NUMBER: _ClassVar[int]
    MEAN_A_FIELD_NUMBER: _ClassVar[int]
    MEAN_B_FIELD_NUMBER: _ClassVar[int]
    DIFFERENCE_FIELD_NUMBER: _ClassVar[int]
    SIGNIFICANT_FIELD_NUMBER: _ClassVar[int]
    MCNEMAR_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    ONLY_A_FIELD_NUMBER: _ClassVar[int]
    ONLY_B_FIELD_NUMBER: _ClassVar[int]
    FLIPS_FIELD_NUMBER: _ClassVar[int]
    REGRESSED_FIELD_NUMBER: _ClassVar[int]
    metric: str
    mean_a: float
    mean_b: float
    difference: Estimate
    significant: bool
    mcnemar: McNemarTest
    pairs: int
    only_a: int
    only_b: int
    flips: _containers.RepeatedCompositeFieldContainer[Flip]
    regressed: bool
    def __init__(self, metric: _Optional[str] = ..., mean_a: _Optional[float] = ..., mean_b: _Optional[float] = ..., difference: _Optional[_Union[Estimate, _Mapping]] = ..., significant: _Optional[bool] = ..., mcnemar: _Optional[_Union[McNemarTest, _Mapping]] = ..., pairs: _Optional[int] = ..., only_a: _Optional[int] = ..., only_b: _Optional[int] = ..., flips: _Optional[_Iterable[_Union[Flip, _Mapping]]] = ..., regressed: _Optional[bool] = ...) -> None: ...

class CompareRunsResponse(_message.Message):
    __slots__ = ("base_run_id", "candidate_run_id", "comparisons", "regressed", "regressions")
    BASE_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    COMPARISONS_FIELD_NUMBER: _ClassVar[int]
    REGRESSED_FIELD_NUMBER: _ClassVar[int]
    REGRESSIONS_FIELD_NUMBER: _ClassVar[int]
    base_run_id: str
    candidate_run_id: str
    comparisons: _containers.RepeatedCompositeFieldContainer[MetricComparison]
    regressed: bool
    regressions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, base_run_id: _Optional[str] = ..., candidate_run_id: _Optional[str] = ..., comparisons: _Optional[_Iterable[_Union[MetricComparison, _Mapping]]] = ..., regressed: _Optional[bool] = ..., regressions: _Optional[_Iterable[str]] = ...) -> None: ...
