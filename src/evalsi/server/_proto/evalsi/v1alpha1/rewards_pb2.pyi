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
