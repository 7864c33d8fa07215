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

class BrokerBucket(_message.Message):
    __slots__ = ["available", "key", "learned", "limit", "rule", "scope", "unit", "window"]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    LEARNED_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    available: float
    key: str
    learned: bool
    limit: float
    rule: str
    scope: str
    unit: str
    window: str
    def __init__(self, scope: _Optional[str] = ..., key: _Optional[str] = ..., unit: _Optional[str] = ..., window: _Optional[str] = ..., rule: _Optional[str] = ..., learned: bool = ..., limit: _Optional[float] = ..., available: _Optional[float] = ...) -> None: ...

class BrokerQueue(_message.Message):
    __slots__ = ["depth", "tenant_id", "workload_class"]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_CLASS_FIELD_NUMBER: _ClassVar[int]
    depth: int
    tenant_id: str
    workload_class: _router_pb2.WorkloadClass
    def __init__(self, workload_class: _Optional[_Union[_router_pb2.WorkloadClass, str]] = ..., tenant_id: _Optional[str] = ..., depth: _Optional[int] = ...) -> None: ...

class BucketChoice(_message.Message):
    __slots__ = ["bucket", "endpoint_id", "prompt_tokens", "reason", "summary", "unavailable"]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    bucket: _router_pb2.SizeBucket
    endpoint_id: str
    prompt_tokens: int
    reason: _router_pb2.RouteReason
    summary: str
    unavailable: str
    def __init__(self, bucket: _Optional[_Union[_router_pb2.SizeBucket, str]] = ..., prompt_tokens: _Optional[int] = ..., endpoint_id: _Optional[str] = ..., reason: _Optional[_Union[_router_pb2.RouteReason, str]] = ..., summary: _Optional[str] = ..., unavailable: _Optional[str] = ...) -> None: ...

class BucketTtft(_message.Message):
    __slots__ = ["bucket", "samples", "typical"]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    TYPICAL_FIELD_NUMBER: _ClassVar[int]
    bucket: _router_pb2.SizeBucket
    samples: int
    typical: _duration_pb2.Duration
    def __init__(self, bucket: _Optional[_Union[_router_pb2.SizeBucket, str]] = ..., typical: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., samples: _Optional[int] = ...) -> None: ...

class EndpointStats(_message.Message):
    __slots__ = ["cache_hit_rate", "cache_samples", "context_length", "cooldown_until", "endpoint_id", "error_rate", "learned_cap_per_minute", "price", "provider", "rate_limited_rate", "requests_per_minute", "throughput_samples", "throughput_tokens_per_second", "traffic_share", "ttft"]
    CACHE_HIT_RATE_FIELD_NUMBER: _ClassVar[int]
    CACHE_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    COOLDOWN_UNTIL_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_RATE_FIELD_NUMBER: _ClassVar[int]
    LEARNED_CAP_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    PRICE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITED_RATE_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_SHARE_FIELD_NUMBER: _ClassVar[int]
    TTFT_FIELD_NUMBER: _ClassVar[int]
    cache_hit_rate: float
    cache_samples: int
    context_length: int
    cooldown_until: _timestamp_pb2.Timestamp
    endpoint_id: str
    error_rate: float
    learned_cap_per_minute: float
    price: _common_pb2.Price
    provider: str
    rate_limited_rate: float
    requests_per_minute: float
    throughput_samples: int
    throughput_tokens_per_second: float
    traffic_share: float
    ttft: _containers.RepeatedCompositeFieldContainer[BucketTtft]
    def __init__(self, endpoint_id: _Optional[str] = ..., provider: _Optional[str] = ..., price: _Optional[_Union[_common_pb2.Price, _Mapping]] = ..., ttft: _Optional[_Iterable[_Union[BucketTtft, _Mapping]]] = ..., throughput_tokens_per_second: _Optional[float] = ..., throughput_samples: _Optional[int] = ..., cache_hit_rate: _Optional[float] = ..., cache_samples: _Optional[int] = ..., requests_per_minute: _Optional[float] = ..., traffic_share: _Optional[float] = ..., cooldown_until: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., rate_limited_rate: _Optional[float] = ..., error_rate: _Optional[float] = ..., learned_cap_per_minute: _Optional[float] = ..., context_length: _Optional[int] = ...) -> None: ...

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

class GetBrokerRequest(_message.Message):
    __slots__ = ["max_buckets"]
    MAX_BUCKETS_FIELD_NUMBER: _ClassVar[int]
    max_buckets: int
    def __init__(self, max_buckets: _Optional[int] = ...) -> None: ...

class GetBrokerResponse(_message.Message):
    __slots__ = ["admitted_from_queue", "buckets", "hedge_budget", "open_reservations", "owner", "queued_total", "queues", "read_time", "timed_out_in_queue", "total_buckets"]
    ADMITTED_FROM_QUEUE_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    HEDGE_BUDGET_FIELD_NUMBER: _ClassVar[int]
    OPEN_RESERVATIONS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    QUEUED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    READ_TIME_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_IN_QUEUE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BUCKETS_FIELD_NUMBER: _ClassVar[int]
    admitted_from_queue: int
    buckets: _containers.RepeatedCompositeFieldContainer[BrokerBucket]
    hedge_budget: HedgeBudget
    open_reservations: int
    owner: str
    queued_total: int
    queues: _containers.RepeatedCompositeFieldContainer[BrokerQueue]
    read_time: _timestamp_pb2.Timestamp
    timed_out_in_queue: int
    total_buckets: int
    def __init__(self, owner: _Optional[str] = ..., read_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., buckets: _Optional[_Iterable[_Union[BrokerBucket, _Mapping]]] = ..., total_buckets: _Optional[int] = ..., open_reservations: _Optional[int] = ..., queues: _Optional[_Iterable[_Union[BrokerQueue, _Mapping]]] = ..., hedge_budget: _Optional[_Union[HedgeBudget, _Mapping]] = ..., queued_total: _Optional[int] = ..., admitted_from_queue: _Optional[int] = ..., timed_out_in_queue: _Optional[int] = ...) -> None: ...

class GetCatalogRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GetCatalogResponse(_message.Message):
    __slots__ = ["replica", "revision", "yaml"]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    YAML_FIELD_NUMBER: _ClassVar[int]
    replica: str
    revision: int
    yaml: str
    def __init__(self, revision: _Optional[int] = ..., yaml: _Optional[str] = ..., replica: _Optional[str] = ...) -> None: ...

class GetEndpointStatsRequest(_message.Message):
    __slots__ = ["model", "tenant_id"]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    model: str
    tenant_id: str
    def __init__(self, model: _Optional[str] = ..., tenant_id: _Optional[str] = ...) -> None: ...

class GetEndpointStatsResponse(_message.Message):
    __slots__ = ["models", "read_time", "replica"]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    READ_TIME_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelStats]
    read_time: _timestamp_pb2.Timestamp
    replica: str
    def __init__(self, models: _Optional[_Iterable[_Union[ModelStats, _Mapping]]] = ..., replica: _Optional[str] = ..., read_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

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

class HedgeBudget(_message.Message):
    __slots__ = ["daily_usd", "granted", "refused", "remaining_usd", "reset_time", "spent_usd"]
    DAILY_USD_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    REMAINING_USD_FIELD_NUMBER: _ClassVar[int]
    RESET_TIME_FIELD_NUMBER: _ClassVar[int]
    SPENT_USD_FIELD_NUMBER: _ClassVar[int]
    daily_usd: float
    granted: int
    refused: int
    remaining_usd: float
    reset_time: _timestamp_pb2.Timestamp
    spent_usd: float
    def __init__(self, daily_usd: _Optional[float] = ..., spent_usd: _Optional[float] = ..., remaining_usd: _Optional[float] = ..., granted: _Optional[int] = ..., refused: _Optional[int] = ..., reset_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

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

class ModelStats(_message.Message):
    __slots__ = ["choices", "endpoints", "model", "output_samples", "typical_output_tokens"]
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    TYPICAL_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    choices: _containers.RepeatedCompositeFieldContainer[BucketChoice]
    endpoints: _containers.RepeatedCompositeFieldContainer[EndpointStats]
    model: str
    output_samples: int
    typical_output_tokens: int
    def __init__(self, model: _Optional[str] = ..., endpoints: _Optional[_Iterable[_Union[EndpointStats, _Mapping]]] = ..., choices: _Optional[_Iterable[_Union[BucketChoice, _Mapping]]] = ..., typical_output_tokens: _Optional[int] = ..., output_samples: _Optional[int] = ...) -> None: ...

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
