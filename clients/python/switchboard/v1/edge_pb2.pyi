from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from switchboard.v1 import common_pb2 as _common_pb2
from switchboard.v1 import router_pb2 as _router_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AcquireHedgeRequest(_message.Message):
    __slots__ = ["endpoint_id", "estimated_cost_usd", "request_id"]
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_COST_USD_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    endpoint_id: str
    estimated_cost_usd: float
    request_id: str
    def __init__(self, request_id: _Optional[str] = ..., endpoint_id: _Optional[str] = ..., estimated_cost_usd: _Optional[float] = ...) -> None: ...

class AcquireHedgeResponse(_message.Message):
    __slots__ = ["granted", "remaining_usd", "reset_time"]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    REMAINING_USD_FIELD_NUMBER: _ClassVar[int]
    RESET_TIME_FIELD_NUMBER: _ClassVar[int]
    granted: bool
    remaining_usd: float
    reset_time: _timestamp_pb2.Timestamp
    def __init__(self, granted: bool = ..., remaining_usd: _Optional[float] = ..., reset_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ActivityBatch(_message.Message):
    __slots__ = ["records", "sequence"]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[_common_pb2.ActivityRecord]
    sequence: int
    def __init__(self, records: _Optional[_Iterable[_Union[_common_pb2.ActivityRecord, _Mapping]]] = ..., sequence: _Optional[int] = ...) -> None: ...

class CallReport(_message.Message):
    __slots__ = ["duration", "endpoint_id", "error", "hedge", "http_status", "model", "outcome", "prefixes", "probe_id", "prompt_hash", "prompt_tokens", "quality_failures", "rate_limit_headers", "report_time", "request_failure", "request_id", "reservation_id", "retry_after", "start_time", "stream", "tenant_id", "traceparent", "ttft", "usage"]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HEDGE_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    PREFIXES_FIELD_NUMBER: _ClassVar[int]
    PROBE_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_HASH_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    QUALITY_FAILURES_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_HEADERS_FIELD_NUMBER: _ClassVar[int]
    REPORT_TIME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FAILURE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TTFT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    duration: _duration_pb2.Duration
    endpoint_id: str
    error: str
    hedge: bool
    http_status: int
    model: str
    outcome: _common_pb2.Outcome
    prefixes: _containers.RepeatedCompositeFieldContainer[_common_pb2.PromptPrefix]
    probe_id: str
    prompt_hash: int
    prompt_tokens: int
    quality_failures: _containers.RepeatedScalarFieldContainer[str]
    rate_limit_headers: _containers.RepeatedCompositeFieldContainer[_common_pb2.Header]
    report_time: _timestamp_pb2.Timestamp
    request_failure: bool
    request_id: str
    reservation_id: str
    retry_after: _duration_pb2.Duration
    start_time: _timestamp_pb2.Timestamp
    stream: bool
    tenant_id: str
    traceparent: str
    ttft: _duration_pb2.Duration
    usage: _common_pb2.Usage
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., endpoint_id: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., start_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ttft: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., outcome: _Optional[_Union[_common_pb2.Outcome, str]] = ..., http_status: _Optional[int] = ..., retry_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., rate_limit_headers: _Optional[_Iterable[_Union[_common_pb2.Header, _Mapping]]] = ..., probe_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., error: _Optional[str] = ..., prompt_hash: _Optional[int] = ..., hedge: bool = ..., reservation_id: _Optional[str] = ..., stream: bool = ..., quality_failures: _Optional[_Iterable[str]] = ..., request_failure: bool = ..., prefixes: _Optional[_Iterable[_Union[_common_pb2.PromptPrefix, _Mapping]]] = ..., traceparent: _Optional[str] = ..., report_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CallReportBatch(_message.Message):
    __slots__ = ["reports"]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    reports: _containers.RepeatedCompositeFieldContainer[CallReport]
    def __init__(self, reports: _Optional[_Iterable[_Union[CallReport, _Mapping]]] = ...) -> None: ...

class ConfigCommand(_message.Message):
    __slots__ = ["catalog_revision"]
    CATALOG_REVISION_FIELD_NUMBER: _ClassVar[int]
    catalog_revision: int
    def __init__(self, catalog_revision: _Optional[int] = ...) -> None: ...

class CooldownCommand(_message.Message):
    __slots__ = ["endpoint_id", "reason", "until"]
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    endpoint_id: str
    reason: str
    until: _timestamp_pb2.Timestamp
    def __init__(self, endpoint_id: _Optional[str] = ..., until: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class EdgeHello(_message.Message):
    __slots__ = ["edge_id", "region", "version"]
    EDGE_ID_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    edge_id: str
    region: str
    version: str
    def __init__(self, edge_id: _Optional[str] = ..., region: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class HedgeSettlement(_message.Message):
    __slots__ = ["loser_cost_usd", "request_id"]
    LOSER_COST_USD_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    loser_cost_usd: float
    request_id: str
    def __init__(self, request_id: _Optional[str] = ..., loser_cost_usd: _Optional[float] = ...) -> None: ...

class KeySet(_message.Message):
    __slots__ = ["key_prefixes", "version"]
    KEY_PREFIXES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    key_prefixes: _containers.RepeatedScalarFieldContainer[int]
    version: int
    def __init__(self, key_prefixes: _Optional[_Iterable[int]] = ..., version: _Optional[int] = ...) -> None: ...

class OwnerTerm(_message.Message):
    __slots__ = ["term"]
    TERM_FIELD_NUMBER: _ClassVar[int]
    term: int
    def __init__(self, term: _Optional[int] = ...) -> None: ...

class ProbeCommand(_message.Message):
    __slots__ = ["endpoint", "max_output_tokens", "model", "probe_id", "prompt_tokens"]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROBE_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    endpoint: _common_pb2.Endpoint
    max_output_tokens: int
    model: str
    probe_id: str
    prompt_tokens: int
    def __init__(self, probe_id: _Optional[str] = ..., model: _Optional[str] = ..., endpoint: _Optional[_Union[_common_pb2.Endpoint, _Mapping]] = ..., prompt_tokens: _Optional[int] = ..., max_output_tokens: _Optional[int] = ...) -> None: ...

class ReconcileBatch(_message.Message):
    __slots__ = ["reconciles", "sequence"]
    RECONCILES_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    reconciles: _containers.RepeatedCompositeFieldContainer[_router_pb2.ReconcileRequest]
    sequence: int
    def __init__(self, reconciles: _Optional[_Iterable[_Union[_router_pb2.ReconcileRequest, _Mapping]]] = ..., sequence: _Optional[int] = ...) -> None: ...

class ReportAck(_message.Message):
    __slots__ = ["accepted", "activity_sequence", "owner_term", "reconcile_sequence"]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    ACTIVITY_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    OWNER_TERM_FIELD_NUMBER: _ClassVar[int]
    RECONCILE_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    activity_sequence: int
    owner_term: int
    reconcile_sequence: int
    def __init__(self, accepted: _Optional[int] = ..., activity_sequence: _Optional[int] = ..., reconcile_sequence: _Optional[int] = ..., owner_term: _Optional[int] = ...) -> None: ...

class ReportRequest(_message.Message):
    __slots__ = ["activity", "batch", "heartbeat", "hello", "reconcile"]
    ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    HELLO_FIELD_NUMBER: _ClassVar[int]
    RECONCILE_FIELD_NUMBER: _ClassVar[int]
    activity: ActivityBatch
    batch: CallReportBatch
    heartbeat: ReservationHeartbeat
    hello: EdgeHello
    reconcile: ReconcileBatch
    def __init__(self, hello: _Optional[_Union[EdgeHello, _Mapping]] = ..., batch: _Optional[_Union[CallReportBatch, _Mapping]] = ..., activity: _Optional[_Union[ActivityBatch, _Mapping]] = ..., reconcile: _Optional[_Union[ReconcileBatch, _Mapping]] = ..., heartbeat: _Optional[_Union[ReservationHeartbeat, _Mapping]] = ...) -> None: ...

class ReportResponse(_message.Message):
    __slots__ = ["ack", "config", "cooldown", "key_set", "owner_term", "probe"]
    ACK_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    COOLDOWN_FIELD_NUMBER: _ClassVar[int]
    KEY_SET_FIELD_NUMBER: _ClassVar[int]
    OWNER_TERM_FIELD_NUMBER: _ClassVar[int]
    PROBE_FIELD_NUMBER: _ClassVar[int]
    ack: ReportAck
    config: ConfigCommand
    cooldown: CooldownCommand
    key_set: KeySet
    owner_term: OwnerTerm
    probe: ProbeCommand
    def __init__(self, ack: _Optional[_Union[ReportAck, _Mapping]] = ..., probe: _Optional[_Union[ProbeCommand, _Mapping]] = ..., cooldown: _Optional[_Union[CooldownCommand, _Mapping]] = ..., config: _Optional[_Union[ConfigCommand, _Mapping]] = ..., key_set: _Optional[_Union[KeySet, _Mapping]] = ..., owner_term: _Optional[_Union[OwnerTerm, _Mapping]] = ...) -> None: ...

class ReservationHeartbeat(_message.Message):
    __slots__ = ["reservation_ids"]
    RESERVATION_IDS_FIELD_NUMBER: _ClassVar[int]
    reservation_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, reservation_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class SettleHedgeRequest(_message.Message):
    __slots__ = ["settlements"]
    SETTLEMENTS_FIELD_NUMBER: _ClassVar[int]
    settlements: _containers.RepeatedCompositeFieldContainer[HedgeSettlement]
    def __init__(self, settlements: _Optional[_Iterable[_Union[HedgeSettlement, _Mapping]]] = ...) -> None: ...

class SettleHedgeResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...
