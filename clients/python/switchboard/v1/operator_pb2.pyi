from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from switchboard.v1 import common_pb2 as _common_pb2
from switchboard.v1 import router_pb2 as _router_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
EXPERIMENT_SCHEDULE_ALTERNATING: ExperimentSchedule
EXPERIMENT_SCHEDULE_PAIRED_RANDOM: ExperimentSchedule
EXPERIMENT_SCHEDULE_UNSPECIFIED: ExperimentSchedule

class ArmReport(_message.Message):
    __slots__ = ["blocks", "burn_in_requests", "metrics", "policy", "requests"]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    BURN_IN_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    blocks: int
    burn_in_requests: int
    metrics: _containers.RepeatedCompositeFieldContainer[MetricEstimate]
    policy: str
    requests: int
    def __init__(self, policy: _Optional[str] = ..., blocks: _Optional[int] = ..., requests: _Optional[int] = ..., burn_in_requests: _Optional[int] = ..., metrics: _Optional[_Iterable[_Union[MetricEstimate, _Mapping]]] = ...) -> None: ...

class Experiment(_message.Message):
    __slots__ = ["arms", "block", "burn_in", "create_time", "end_time", "id", "models", "schedule", "seed", "start_time", "stop_time"]
    ARMS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    BURN_IN_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    STOP_TIME_FIELD_NUMBER: _ClassVar[int]
    arms: _containers.RepeatedScalarFieldContainer[str]
    block: _duration_pb2.Duration
    burn_in: _duration_pb2.Duration
    create_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    id: str
    models: _containers.RepeatedScalarFieldContainer[str]
    schedule: ExperimentSchedule
    seed: int
    start_time: _timestamp_pb2.Timestamp
    stop_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., arms: _Optional[_Iterable[str]] = ..., start_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., block: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., burn_in: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., schedule: _Optional[_Union[ExperimentSchedule, str]] = ..., seed: _Optional[int] = ..., models: _Optional[_Iterable[str]] = ..., end_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., stop_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., create_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ["identity", "model", "parameters", "provider", "region", "session_id", "stream", "tokens"]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    identity: _router_pb2.Identity
    model: str
    parameters: _containers.RepeatedScalarFieldContainer[str]
    provider: _router_pb2.ProviderPreferences
    region: str
    session_id: str
    stream: bool
    tokens: _router_pb2.TokenEstimate
    def __init__(self, identity: _Optional[_Union[_router_pb2.Identity, _Mapping]] = ..., model: _Optional[str] = ..., tokens: _Optional[_Union[_router_pb2.TokenEstimate, _Mapping]] = ..., stream: bool = ..., provider: _Optional[_Union[_router_pb2.ProviderPreferences, _Mapping]] = ..., parameters: _Optional[_Iterable[str]] = ..., region: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class ExplainResponse(_message.Message):
    __slots__ = ["decision", "endpoint", "fallbacks", "hedge", "identity", "max_price", "model"]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    FALLBACKS_FIELD_NUMBER: _ClassVar[int]
    HEDGE_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    MAX_PRICE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    decision: _router_pb2.Decision
    endpoint: _common_pb2.Endpoint
    fallbacks: _containers.RepeatedCompositeFieldContainer[_common_pb2.Endpoint]
    hedge: _router_pb2.HedgePlan
    identity: _router_pb2.Identity
    max_price: _router_pb2.MaxPrice
    model: str
    def __init__(self, model: _Optional[str] = ..., endpoint: _Optional[_Union[_common_pb2.Endpoint, _Mapping]] = ..., fallbacks: _Optional[_Iterable[_Union[_common_pb2.Endpoint, _Mapping]]] = ..., decision: _Optional[_Union[_router_pb2.Decision, _Mapping]] = ..., hedge: _Optional[_Union[_router_pb2.HedgePlan, _Mapping]] = ..., identity: _Optional[_Union[_router_pb2.Identity, _Mapping]] = ..., max_price: _Optional[_Union[_router_pb2.MaxPrice, _Mapping]] = ...) -> None: ...

class GetExperimentRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GetExperimentResponse(_message.Message):
    __slots__ = ["arms", "current_arm", "current_block", "differences", "experiment", "replicas"]
    ARMS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_ARM_FIELD_NUMBER: _ClassVar[int]
    CURRENT_BLOCK_FIELD_NUMBER: _ClassVar[int]
    DIFFERENCES_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    arms: _containers.RepeatedCompositeFieldContainer[ArmReport]
    current_arm: str
    current_block: int
    differences: _containers.RepeatedCompositeFieldContainer[MetricEstimate]
    experiment: Experiment
    replicas: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, experiment: _Optional[_Union[Experiment, _Mapping]] = ..., arms: _Optional[_Iterable[_Union[ArmReport, _Mapping]]] = ..., differences: _Optional[_Iterable[_Union[MetricEstimate, _Mapping]]] = ..., current_block: _Optional[int] = ..., current_arm: _Optional[str] = ..., replicas: _Optional[_Iterable[str]] = ...) -> None: ...

class MetricEstimate(_message.Message):
    __slots__ = ["blocks", "ci_high", "ci_low", "estimate", "has_interval", "name", "pooled", "unit"]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    CI_HIGH_FIELD_NUMBER: _ClassVar[int]
    CI_LOW_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    HAS_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    POOLED_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    blocks: int
    ci_high: float
    ci_low: float
    estimate: float
    has_interval: bool
    name: str
    pooled: float
    unit: str
    def __init__(self, name: _Optional[str] = ..., unit: _Optional[str] = ..., estimate: _Optional[float] = ..., ci_low: _Optional[float] = ..., ci_high: _Optional[float] = ..., has_interval: bool = ..., pooled: _Optional[float] = ..., blocks: _Optional[int] = ...) -> None: ...

class StartExperimentRequest(_message.Message):
    __slots__ = ["blocks", "experiment"]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    blocks: int
    experiment: Experiment
    def __init__(self, experiment: _Optional[_Union[Experiment, _Mapping]] = ..., blocks: _Optional[int] = ...) -> None: ...

class StartExperimentResponse(_message.Message):
    __slots__ = ["experiment"]
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    experiment: Experiment
    def __init__(self, experiment: _Optional[_Union[Experiment, _Mapping]] = ...) -> None: ...

class StopExperimentRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class StopExperimentResponse(_message.Message):
    __slots__ = ["experiment"]
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    experiment: Experiment
    def __init__(self, experiment: _Optional[_Union[Experiment, _Mapping]] = ...) -> None: ...

class ExperimentSchedule(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
