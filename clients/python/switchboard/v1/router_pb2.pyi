from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from switchboard.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DATA_COLLECTION_ALLOW: DataCollection
DATA_COLLECTION_DENY: DataCollection
DATA_COLLECTION_UNSPECIFIED: DataCollection
DESCRIPTOR: _descriptor.FileDescriptor
LIMIT_SCOPE_API_KEY: LimitScope
LIMIT_SCOPE_APP: LimitScope
LIMIT_SCOPE_MODEL_ROUTE: LimitScope
LIMIT_SCOPE_PARTNER: LimitScope
LIMIT_SCOPE_PROVIDER_PROJECT: LimitScope
LIMIT_SCOPE_PROVIDER_WORKSPACE: LimitScope
LIMIT_SCOPE_TENANT: LimitScope
LIMIT_SCOPE_UNSPECIFIED: LimitScope
LIMIT_UNIT_CONCURRENT_REQUESTS: LimitUnit
LIMIT_UNIT_INPUT_TOKENS: LimitUnit
LIMIT_UNIT_OUTPUT_TOKENS: LimitUnit
LIMIT_UNIT_REQUESTS: LimitUnit
LIMIT_UNIT_TOTAL_TOKENS: LimitUnit
LIMIT_UNIT_UNSPECIFIED: LimitUnit
LIMIT_UNIT_USD: LimitUnit
REFUSAL_REASON_DEADLINE: RefusalReason
REFUSAL_REASON_NON_RETRYABLE_POLICY: RefusalReason
REFUSAL_REASON_NON_RETRYABLE_REQUEST: RefusalReason
REFUSAL_REASON_RETRYABLE_CAPACITY: RefusalReason
REFUSAL_REASON_RETRYABLE_OVERLOAD: RefusalReason
REFUSAL_REASON_UNSPECIFIED: RefusalReason
ROUTE_REASON_CHEAPEST_NO_DATA: RouteReason
ROUTE_REASON_CHEAPEST_QUALIFYING: RouteReason
ROUTE_REASON_EXPLORATION: RouteReason
ROUTE_REASON_FLOOR: RouteReason
ROUTE_REASON_NITRO: RouteReason
ROUTE_REASON_OFFLINE: RouteReason
ROUTE_REASON_PRICE_GUARD: RouteReason
ROUTE_REASON_ROUTING_COST: RouteReason
ROUTE_REASON_UNSPECIFIED: RouteReason
ROUTE_REASON_USER_ORDER: RouteReason
ROUTE_REASON_USER_SORT: RouteReason
SIZE_BUCKET_32K_TO_128K: SizeBucket
SIZE_BUCKET_8K_TO_32K: SizeBucket
SIZE_BUCKET_OVER_128K: SizeBucket
SIZE_BUCKET_UNDER_8K: SizeBucket
SIZE_BUCKET_UNSPECIFIED: SizeBucket
SORT_LATENCY: Sort
SORT_PRICE: Sort
SORT_THROUGHPUT: Sort
SORT_UNSPECIFIED: Sort
WORKLOAD_CLASS_BACKGROUND: WorkloadClass
WORKLOAD_CLASS_BATCH: WorkloadClass
WORKLOAD_CLASS_INTERACTIVE: WorkloadClass
WORKLOAD_CLASS_PARTNER: WorkloadClass
WORKLOAD_CLASS_UNSPECIFIED: WorkloadClass

class BucketCharge(_message.Message):
    __slots__ = ["amount", "bucket_id", "scope", "unit"]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    amount: float
    bucket_id: str
    scope: LimitScope
    unit: LimitUnit
    def __init__(self, bucket_id: _Optional[str] = ..., scope: _Optional[_Union[LimitScope, str]] = ..., unit: _Optional[_Union[LimitUnit, str]] = ..., amount: _Optional[float] = ...) -> None: ...

class Candidate(_message.Message):
    __slots__ = ["cost_usd", "endpoint_id", "estimated_cached_tokens", "note", "provider", "qualified", "routing_cost_usd", "samples", "share", "throughput", "typical_ttft"]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    QUALIFIED_FIELD_NUMBER: _ClassVar[int]
    ROUTING_COST_USD_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    TYPICAL_TTFT_FIELD_NUMBER: _ClassVar[int]
    cost_usd: float
    endpoint_id: str
    estimated_cached_tokens: int
    note: str
    provider: str
    qualified: bool
    routing_cost_usd: float
    samples: int
    share: float
    throughput: float
    typical_ttft: _duration_pb2.Duration
    def __init__(self, endpoint_id: _Optional[str] = ..., provider: _Optional[str] = ..., typical_ttft: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., samples: _Optional[int] = ..., cost_usd: _Optional[float] = ..., estimated_cached_tokens: _Optional[int] = ..., qualified: bool = ..., note: _Optional[str] = ..., throughput: _Optional[float] = ..., routing_cost_usd: _Optional[float] = ..., share: _Optional[float] = ...) -> None: ...

class DecideRequest(_message.Message):
    __slots__ = ["dry_run", "explain", "idempotency_key", "identity", "model", "parameters", "provider", "region", "request_id", "reservation_ttl", "reserve", "session_id", "stream", "tokens"]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_TTL_FIELD_NUMBER: _ClassVar[int]
    RESERVE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    dry_run: bool
    explain: bool
    idempotency_key: str
    identity: Identity
    model: str
    parameters: _containers.RepeatedScalarFieldContainer[str]
    provider: ProviderPreferences
    region: str
    request_id: str
    reservation_ttl: _duration_pb2.Duration
    reserve: bool
    session_id: str
    stream: bool
    tokens: TokenEstimate
    def __init__(self, request_id: _Optional[str] = ..., identity: _Optional[_Union[Identity, _Mapping]] = ..., model: _Optional[str] = ..., tokens: _Optional[_Union[TokenEstimate, _Mapping]] = ..., stream: bool = ..., provider: _Optional[_Union[ProviderPreferences, _Mapping]] = ..., parameters: _Optional[_Iterable[str]] = ..., region: _Optional[str] = ..., explain: bool = ..., dry_run: bool = ..., reserve: bool = ..., idempotency_key: _Optional[str] = ..., reservation_ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., session_id: _Optional[str] = ...) -> None: ...

class DecideResponse(_message.Message):
    __slots__ = ["caps", "decision", "demand", "endpoint", "fallbacks", "grant", "hedge", "identity", "max_price", "model", "queue", "refusal", "request_id", "reservation"]
    CAPS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    DEMAND_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    FALLBACKS_FIELD_NUMBER: _ClassVar[int]
    GRANT_FIELD_NUMBER: _ClassVar[int]
    HEDGE_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    MAX_PRICE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    caps: _common_pb2.DecisionCaps
    decision: Decision
    demand: Demand
    endpoint: _common_pb2.Endpoint
    fallbacks: _containers.RepeatedCompositeFieldContainer[_common_pb2.Endpoint]
    grant: bytes
    hedge: HedgePlan
    identity: Identity
    max_price: MaxPrice
    model: str
    queue: QueueDecision
    refusal: Refusal
    request_id: str
    reservation: Reservation
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., endpoint: _Optional[_Union[_common_pb2.Endpoint, _Mapping]] = ..., fallbacks: _Optional[_Iterable[_Union[_common_pb2.Endpoint, _Mapping]]] = ..., decision: _Optional[_Union[Decision, _Mapping]] = ..., hedge: _Optional[_Union[HedgePlan, _Mapping]] = ..., identity: _Optional[_Union[Identity, _Mapping]] = ..., max_price: _Optional[_Union[MaxPrice, _Mapping]] = ..., reservation: _Optional[_Union[Reservation, _Mapping]] = ..., refusal: _Optional[_Union[Refusal, _Mapping]] = ..., demand: _Optional[_Union[Demand, _Mapping]] = ..., grant: _Optional[bytes] = ..., queue: _Optional[_Union[QueueDecision, _Mapping]] = ..., caps: _Optional[_Union[_common_pb2.DecisionCaps, _Mapping]] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ["bucket", "candidates", "fastest_ttft", "reason", "summary"]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    FASTEST_TTFT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    bucket: SizeBucket
    candidates: _containers.RepeatedCompositeFieldContainer[Candidate]
    fastest_ttft: _duration_pb2.Duration
    reason: RouteReason
    summary: str
    def __init__(self, reason: _Optional[_Union[RouteReason, str]] = ..., bucket: _Optional[_Union[SizeBucket, str]] = ..., summary: _Optional[str] = ..., candidates: _Optional[_Iterable[_Union[Candidate, _Mapping]]] = ..., fastest_ttft: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Demand(_message.Message):
    __slots__ = ["input_tokens", "output_tokens", "requests", "usd"]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    USD_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    requests: int
    usd: float
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., usd: _Optional[float] = ..., requests: _Optional[int] = ...) -> None: ...

class GetActivityRequest(_message.Message):
    __slots__ = ["id", "identity"]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    identity: Identity
    def __init__(self, identity: _Optional[_Union[Identity, _Mapping]] = ..., id: _Optional[str] = ...) -> None: ...

class GetActivityResponse(_message.Message):
    __slots__ = ["record"]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: _common_pb2.ActivityRecord
    def __init__(self, record: _Optional[_Union[_common_pb2.ActivityRecord, _Mapping]] = ...) -> None: ...

class HedgePlan(_message.Message):
    __slots__ = ["delay", "endpoint", "mode"]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    delay: _duration_pb2.Duration
    endpoint: _common_pb2.Endpoint
    mode: _common_pb2.HedgeMode
    def __init__(self, mode: _Optional[_Union[_common_pb2.HedgeMode, str]] = ..., delay: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., endpoint: _Optional[_Union[_common_pb2.Endpoint, _Mapping]] = ...) -> None: ...

class Identity(_message.Message):
    __slots__ = ["api_key_id", "api_key_sha256", "app", "environment", "partner", "tenant_id", "workload_class"]
    API_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    API_KEY_SHA256_FIELD_NUMBER: _ClassVar[int]
    APP_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    PARTNER_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_CLASS_FIELD_NUMBER: _ClassVar[int]
    api_key_id: str
    api_key_sha256: str
    app: str
    environment: str
    partner: str
    tenant_id: str
    workload_class: WorkloadClass
    def __init__(self, tenant_id: _Optional[str] = ..., api_key_id: _Optional[str] = ..., api_key_sha256: _Optional[str] = ..., app: _Optional[str] = ..., environment: _Optional[str] = ..., partner: _Optional[str] = ..., workload_class: _Optional[_Union[WorkloadClass, str]] = ...) -> None: ...

class KeepReservationsRequest(_message.Message):
    __slots__ = ["reservation_ids"]
    RESERVATION_IDS_FIELD_NUMBER: _ClassVar[int]
    reservation_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, reservation_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class KeepReservationsResponse(_message.Message):
    __slots__ = ["kept"]
    KEPT_FIELD_NUMBER: _ClassVar[int]
    kept: int
    def __init__(self, kept: _Optional[int] = ...) -> None: ...

class ListActivityRequest(_message.Message):
    __slots__ = ["cursor", "end_time", "identity", "limit", "model", "start_time"]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    cursor: str
    end_time: _timestamp_pb2.Timestamp
    identity: Identity
    limit: int
    model: str
    start_time: _timestamp_pb2.Timestamp
    def __init__(self, identity: _Optional[_Union[Identity, _Mapping]] = ..., start_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., model: _Optional[str] = ..., limit: _Optional[int] = ..., cursor: _Optional[str] = ...) -> None: ...

class ListActivityResponse(_message.Message):
    __slots__ = ["missing_replicas", "next_cursor", "records"]
    MISSING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    missing_replicas: _containers.RepeatedScalarFieldContainer[str]
    next_cursor: str
    records: _containers.RepeatedCompositeFieldContainer[_common_pb2.ActivityRecord]
    def __init__(self, records: _Optional[_Iterable[_Union[_common_pb2.ActivityRecord, _Mapping]]] = ..., next_cursor: _Optional[str] = ..., missing_replicas: _Optional[_Iterable[str]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ["identity"]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    identity: Identity
    def __init__(self, identity: _Optional[_Union[Identity, _Mapping]] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ["models"]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[Model]
    def __init__(self, models: _Optional[_Iterable[_Union[Model, _Mapping]]] = ...) -> None: ...

class MaxPrice(_message.Message):
    __slots__ = ["completion", "prompt"]
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    completion: float
    prompt: float
    def __init__(self, prompt: _Optional[float] = ..., completion: _Optional[float] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ["aliases", "context_length", "create_time", "id", "list_price", "providers"]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LIST_PRICE_FIELD_NUMBER: _ClassVar[int]
    PROVIDERS_FIELD_NUMBER: _ClassVar[int]
    aliases: _containers.RepeatedScalarFieldContainer[str]
    context_length: int
    create_time: _timestamp_pb2.Timestamp
    id: str
    list_price: _common_pb2.Price
    providers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., list_price: _Optional[_Union[_common_pb2.Price, _Mapping]] = ..., context_length: _Optional[int] = ..., providers: _Optional[_Iterable[str]] = ..., aliases: _Optional[_Iterable[str]] = ..., create_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ProviderPreferences(_message.Message):
    __slots__ = ["allow_fallbacks", "data_collection", "ignore", "max_price", "only", "order", "preferred_max_latency", "preferred_min_throughput", "quantizations", "require_parameters", "sort", "zdr"]
    ALLOW_FALLBACKS_FIELD_NUMBER: _ClassVar[int]
    DATA_COLLECTION_FIELD_NUMBER: _ClassVar[int]
    IGNORE_FIELD_NUMBER: _ClassVar[int]
    MAX_PRICE_FIELD_NUMBER: _ClassVar[int]
    ONLY_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    PREFERRED_MAX_LATENCY_FIELD_NUMBER: _ClassVar[int]
    PREFERRED_MIN_THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    QUANTIZATIONS_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    SORT_FIELD_NUMBER: _ClassVar[int]
    ZDR_FIELD_NUMBER: _ClassVar[int]
    allow_fallbacks: bool
    data_collection: DataCollection
    ignore: _containers.RepeatedScalarFieldContainer[str]
    max_price: MaxPrice
    only: _containers.RepeatedScalarFieldContainer[str]
    order: _containers.RepeatedScalarFieldContainer[str]
    preferred_max_latency: _duration_pb2.Duration
    preferred_min_throughput: float
    quantizations: _containers.RepeatedScalarFieldContainer[str]
    require_parameters: bool
    sort: Sort
    zdr: bool
    def __init__(self, only: _Optional[_Iterable[str]] = ..., ignore: _Optional[_Iterable[str]] = ..., order: _Optional[_Iterable[str]] = ..., sort: _Optional[_Union[Sort, str]] = ..., max_price: _Optional[_Union[MaxPrice, _Mapping]] = ..., allow_fallbacks: bool = ..., require_parameters: bool = ..., data_collection: _Optional[_Union[DataCollection, str]] = ..., zdr: bool = ..., quantizations: _Optional[_Iterable[str]] = ..., preferred_min_throughput: _Optional[float] = ..., preferred_max_latency: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class QueueDecision(_message.Message):
    __slots__ = ["estimated_wait", "position", "queue_id", "waited", "workload_class"]
    ESTIMATED_WAIT_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    WAITED_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_CLASS_FIELD_NUMBER: _ClassVar[int]
    estimated_wait: _duration_pb2.Duration
    position: int
    queue_id: str
    waited: _duration_pb2.Duration
    workload_class: WorkloadClass
    def __init__(self, queue_id: _Optional[str] = ..., workload_class: _Optional[_Union[WorkloadClass, str]] = ..., position: _Optional[int] = ..., waited: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., estimated_wait: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ReconcileRequest(_message.Message):
    __slots__ = ["failure", "failure_deferred", "outcome", "provider_error_code", "rate_limit_headers", "reservation_id", "usage"]
    FAILURE_DEFERRED_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_HEADERS_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    failure: RefusalReason
    failure_deferred: bool
    outcome: _common_pb2.Outcome
    provider_error_code: str
    rate_limit_headers: _containers.RepeatedCompositeFieldContainer[_common_pb2.Header]
    reservation_id: str
    usage: _common_pb2.Usage
    def __init__(self, reservation_id: _Optional[str] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., outcome: _Optional[_Union[_common_pb2.Outcome, str]] = ..., rate_limit_headers: _Optional[_Iterable[_Union[_common_pb2.Header, _Mapping]]] = ..., failure: _Optional[_Union[RefusalReason, str]] = ..., provider_error_code: _Optional[str] = ..., failure_deferred: bool = ...) -> None: ...

class ReconcileResponse(_message.Message):
    __slots__ = ["owner_term", "released"]
    OWNER_TERM_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    owner_term: int
    released: _containers.RepeatedCompositeFieldContainer[BucketCharge]
    def __init__(self, released: _Optional[_Iterable[_Union[BucketCharge, _Mapping]]] = ..., owner_term: _Optional[int] = ...) -> None: ...

class Refusal(_message.Message):
    __slots__ = ["bucket_id", "code", "fallback_model", "limit", "message", "reason", "remaining", "reset_time", "retry_after", "scope", "unit", "workload_class"]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_MODEL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    RESET_TIME_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_CLASS_FIELD_NUMBER: _ClassVar[int]
    bucket_id: str
    code: str
    fallback_model: str
    limit: float
    message: str
    reason: RefusalReason
    remaining: float
    reset_time: _timestamp_pb2.Timestamp
    retry_after: _duration_pb2.Duration
    scope: LimitScope
    unit: LimitUnit
    workload_class: WorkloadClass
    def __init__(self, reason: _Optional[_Union[RefusalReason, str]] = ..., scope: _Optional[_Union[LimitScope, str]] = ..., unit: _Optional[_Union[LimitUnit, str]] = ..., limit: _Optional[float] = ..., remaining: _Optional[float] = ..., reset_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., retry_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., workload_class: _Optional[_Union[WorkloadClass, str]] = ..., message: _Optional[str] = ..., bucket_id: _Optional[str] = ..., code: _Optional[str] = ..., fallback_model: _Optional[str] = ...) -> None: ...

class ReportCallRequest(_message.Message):
    __slots__ = ["prefixes", "prompt_tokens", "reconciles", "record"]
    PREFIXES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RECONCILES_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    prefixes: _containers.RepeatedCompositeFieldContainer[_common_pb2.PromptPrefix]
    prompt_tokens: int
    reconciles: _containers.RepeatedCompositeFieldContainer[ReconcileRequest]
    record: _common_pb2.ActivityRecord
    def __init__(self, record: _Optional[_Union[_common_pb2.ActivityRecord, _Mapping]] = ..., reconciles: _Optional[_Iterable[_Union[ReconcileRequest, _Mapping]]] = ..., prompt_tokens: _Optional[int] = ..., prefixes: _Optional[_Iterable[_Union[_common_pb2.PromptPrefix, _Mapping]]] = ...) -> None: ...

class ReportCallResponse(_message.Message):
    __slots__ = ["reconciled"]
    RECONCILED_FIELD_NUMBER: _ClassVar[int]
    reconciled: int
    def __init__(self, reconciled: _Optional[int] = ...) -> None: ...

class Reservation(_message.Message):
    __slots__ = ["charges", "create_time", "demand", "expire_time", "idempotency_key", "request_id", "reservation_id"]
    CHARGES_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    DEMAND_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    charges: _containers.RepeatedCompositeFieldContainer[BucketCharge]
    create_time: _timestamp_pb2.Timestamp
    demand: Demand
    expire_time: _timestamp_pb2.Timestamp
    idempotency_key: str
    request_id: str
    reservation_id: str
    def __init__(self, reservation_id: _Optional[str] = ..., request_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., demand: _Optional[_Union[Demand, _Mapping]] = ..., charges: _Optional[_Iterable[_Union[BucketCharge, _Mapping]]] = ..., create_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., expire_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ReserveRequest(_message.Message):
    __slots__ = ["attempt", "demand", "endpoint_id", "idempotency_key", "identity", "max_wait", "model", "previous_failure", "request_id", "ttl"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DEMAND_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FAILURE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    demand: Demand
    endpoint_id: str
    idempotency_key: str
    identity: Identity
    max_wait: _duration_pb2.Duration
    model: str
    previous_failure: RefusalReason
    request_id: str
    ttl: _duration_pb2.Duration
    def __init__(self, request_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., identity: _Optional[_Union[Identity, _Mapping]] = ..., model: _Optional[str] = ..., endpoint_id: _Optional[str] = ..., demand: _Optional[_Union[Demand, _Mapping]] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., max_wait: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., attempt: _Optional[int] = ..., previous_failure: _Optional[_Union[RefusalReason, str]] = ...) -> None: ...

class ReserveResponse(_message.Message):
    __slots__ = ["admitted", "queue", "refusal", "reservation"]
    ADMITTED_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    admitted: bool
    queue: QueueDecision
    refusal: Refusal
    reservation: Reservation
    def __init__(self, admitted: bool = ..., reservation: _Optional[_Union[Reservation, _Mapping]] = ..., refusal: _Optional[_Union[Refusal, _Mapping]] = ..., queue: _Optional[_Union[QueueDecision, _Mapping]] = ...) -> None: ...

class TokenEstimate(_message.Message):
    __slots__ = ["cache_write_1h_tokens", "cache_write_tokens", "cached_input_tokens", "input_tokens", "max_output_tokens", "prefixes"]
    CACHED_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_1H_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFIXES_FIELD_NUMBER: _ClassVar[int]
    cache_write_1h_tokens: int
    cache_write_tokens: int
    cached_input_tokens: int
    input_tokens: int
    max_output_tokens: int
    prefixes: _containers.RepeatedCompositeFieldContainer[_common_pb2.PromptPrefix]
    def __init__(self, input_tokens: _Optional[int] = ..., cached_input_tokens: _Optional[int] = ..., max_output_tokens: _Optional[int] = ..., prefixes: _Optional[_Iterable[_Union[_common_pb2.PromptPrefix, _Mapping]]] = ..., cache_write_tokens: _Optional[int] = ..., cache_write_1h_tokens: _Optional[int] = ...) -> None: ...

class WorkloadClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Sort(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class DataCollection(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class SizeBucket(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class RouteReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class LimitUnit(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class LimitScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class RefusalReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
