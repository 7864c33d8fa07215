from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from switchboard.v1 import edge_pb2 as _edge_pb2
from switchboard.v1 import operator_pb2 as _operator_pb2
from switchboard.v1 import router_pb2 as _router_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AffinityEntry(_message.Message):
    __slots__ = ["hash", "served", "tokens"]
    HASH_FIELD_NUMBER: _ClassVar[int]
    SERVED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    hash: int
    served: _containers.RepeatedCompositeFieldContainer[AffinityServed]
    tokens: int
    def __init__(self, hash: _Optional[int] = ..., tokens: _Optional[int] = ..., served: _Optional[_Iterable[_Union[AffinityServed, _Mapping]]] = ...) -> None: ...

class AffinityServed(_message.Message):
    __slots__ = ["endpoint_id", "time", "whole"]
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    WHOLE_FIELD_NUMBER: _ClassVar[int]
    endpoint_id: str
    time: _timestamp_pb2.Timestamp
    whole: bool
    def __init__(self, endpoint_id: _Optional[str] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., whole: bool = ...) -> None: ...

class CooldownEntry(_message.Message):
    __slots__ = ["endpoint_id", "refusals", "until"]
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    REFUSALS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    endpoint_id: str
    refusals: _containers.RepeatedCompositeFieldContainer[_timestamp_pb2.Timestamp]
    until: _timestamp_pb2.Timestamp
    def __init__(self, endpoint_id: _Optional[str] = ..., until: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., refusals: _Optional[_Iterable[_Union[_timestamp_pb2.Timestamp, _Mapping]]] = ...) -> None: ...

class ForwardAcquireHedgeRequest(_message.Message):
    __slots__ = ["caller_id", "request"]
    CALLER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    caller_id: str
    request: _edge_pb2.AcquireHedgeRequest
    def __init__(self, caller_id: _Optional[str] = ..., request: _Optional[_Union[_edge_pb2.AcquireHedgeRequest, _Mapping]] = ...) -> None: ...

class ForwardAcquireHedgeResponse(_message.Message):
    __slots__ = ["response"]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _edge_pb2.AcquireHedgeResponse
    def __init__(self, response: _Optional[_Union[_edge_pb2.AcquireHedgeResponse, _Mapping]] = ...) -> None: ...

class ForwardGetActivityRequest(_message.Message):
    __slots__ = ["caller_id", "request"]
    CALLER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    caller_id: str
    request: _router_pb2.GetActivityRequest
    def __init__(self, caller_id: _Optional[str] = ..., request: _Optional[_Union[_router_pb2.GetActivityRequest, _Mapping]] = ...) -> None: ...

class ForwardGetActivityResponse(_message.Message):
    __slots__ = ["response"]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _router_pb2.GetActivityResponse
    def __init__(self, response: _Optional[_Union[_router_pb2.GetActivityResponse, _Mapping]] = ...) -> None: ...

class ForwardGetBrokerRequest(_message.Message):
    __slots__ = ["caller_id", "request"]
    CALLER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    caller_id: str
    request: _operator_pb2.GetBrokerRequest
    def __init__(self, caller_id: _Optional[str] = ..., request: _Optional[_Union[_operator_pb2.GetBrokerRequest, _Mapping]] = ...) -> None: ...

class ForwardGetBrokerResponse(_message.Message):
    __slots__ = ["response"]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _operator_pb2.GetBrokerResponse
    def __init__(self, response: _Optional[_Union[_operator_pb2.GetBrokerResponse, _Mapping]] = ...) -> None: ...

class ForwardKeepReservationsRequest(_message.Message):
    __slots__ = ["caller_id", "request"]
    CALLER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    caller_id: str
    request: _router_pb2.KeepReservationsRequest
    def __init__(self, caller_id: _Optional[str] = ..., request: _Optional[_Union[_router_pb2.KeepReservationsRequest, _Mapping]] = ...) -> None: ...

class ForwardKeepReservationsResponse(_message.Message):
    __slots__ = ["response"]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _router_pb2.KeepReservationsResponse
    def __init__(self, response: _Optional[_Union[_router_pb2.KeepReservationsResponse, _Mapping]] = ...) -> None: ...

class ForwardListActivityRequest(_message.Message):
    __slots__ = ["caller_id", "request"]
    CALLER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    caller_id: str
    request: _router_pb2.ListActivityRequest
    def __init__(self, caller_id: _Optional[str] = ..., request: _Optional[_Union[_router_pb2.ListActivityRequest, _Mapping]] = ...) -> None: ...

class ForwardListActivityResponse(_message.Message):
    __slots__ = ["response"]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _router_pb2.ListActivityResponse
    def __init__(self, response: _Optional[_Union[_router_pb2.ListActivityResponse, _Mapping]] = ...) -> None: ...

class ForwardReconcileRequest(_message.Message):
    __slots__ = ["caller_id", "request"]
    CALLER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    caller_id: str
    request: _router_pb2.ReconcileRequest
    def __init__(self, caller_id: _Optional[str] = ..., request: _Optional[_Union[_router_pb2.ReconcileRequest, _Mapping]] = ...) -> None: ...

class ForwardReconcileResponse(_message.Message):
    __slots__ = ["response"]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _router_pb2.ReconcileResponse
    def __init__(self, response: _Optional[_Union[_router_pb2.ReconcileResponse, _Mapping]] = ...) -> None: ...

class ForwardReserveRequest(_message.Message):
    __slots__ = ["caller_id", "request"]
    CALLER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    caller_id: str
    request: _router_pb2.ReserveRequest
    def __init__(self, caller_id: _Optional[str] = ..., request: _Optional[_Union[_router_pb2.ReserveRequest, _Mapping]] = ...) -> None: ...

class ForwardReserveResponse(_message.Message):
    __slots__ = ["response"]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _router_pb2.ReserveResponse
    def __init__(self, response: _Optional[_Union[_router_pb2.ReserveResponse, _Mapping]] = ...) -> None: ...

class ForwardSettleHedgeRequest(_message.Message):
    __slots__ = ["caller_id", "request"]
    CALLER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    caller_id: str
    request: _edge_pb2.SettleHedgeRequest
    def __init__(self, caller_id: _Optional[str] = ..., request: _Optional[_Union[_edge_pb2.SettleHedgeRequest, _Mapping]] = ...) -> None: ...

class ForwardSettleHedgeResponse(_message.Message):
    __slots__ = ["response"]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _edge_pb2.SettleHedgeResponse
    def __init__(self, response: _Optional[_Union[_edge_pb2.SettleHedgeResponse, _Mapping]] = ...) -> None: ...

class LeaseAsk(_message.Message):
    __slots__ = ["bucket_id", "demand", "returned"]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    DEMAND_FIELD_NUMBER: _ClassVar[int]
    RETURNED_FIELD_NUMBER: _ClassVar[int]
    bucket_id: str
    demand: float
    returned: float
    def __init__(self, bucket_id: _Optional[str] = ..., returned: _Optional[float] = ..., demand: _Optional[float] = ...) -> None: ...

class LeaseGrant(_message.Message):
    __slots__ = ["amount", "bucket_id"]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    amount: float
    bucket_id: str
    def __init__(self, bucket_id: _Optional[str] = ..., amount: _Optional[float] = ...) -> None: ...

class LeaseObservation(_message.Message):
    __slots__ = ["endpoint_id", "model", "reconcile", "scoped", "tenant_id"]
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RECONCILE_FIELD_NUMBER: _ClassVar[int]
    SCOPED_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    endpoint_id: str
    model: str
    reconcile: _router_pb2.ReconcileRequest
    scoped: bool
    tenant_id: str
    def __init__(self, endpoint_id: _Optional[str] = ..., model: _Optional[str] = ..., tenant_id: _Optional[str] = ..., reconcile: _Optional[_Union[_router_pb2.ReconcileRequest, _Mapping]] = ..., scoped: bool = ...) -> None: ...

class ObservedBatch(_message.Message):
    __slots__ = ["edge", "reports"]
    EDGE_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    edge: _edge_pb2.EdgeHello
    reports: _containers.RepeatedCompositeFieldContainer[_edge_pb2.CallReport]
    def __init__(self, edge: _Optional[_Union[_edge_pb2.EdgeHello, _Mapping]] = ..., reports: _Optional[_Iterable[_Union[_edge_pb2.CallReport, _Mapping]]] = ...) -> None: ...

class OutcomeEntry(_message.Message):
    __slots__ = ["cached_tokens", "call_seconds", "calls", "cap", "cap_time", "charged_usd", "checks", "endpoint_id", "failed", "input_tokens", "output_tokens", "output_tokens_timed", "paused_until", "poor", "priced", "rate_limited", "recent_calls", "recent_failed", "time"]
    class ChecksEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    CALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CAP_FIELD_NUMBER: _ClassVar[int]
    CAP_TIME_FIELD_NUMBER: _ClassVar[int]
    CHARGED_USD_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_TIMED_FIELD_NUMBER: _ClassVar[int]
    PAUSED_UNTIL_FIELD_NUMBER: _ClassVar[int]
    POOR_FIELD_NUMBER: _ClassVar[int]
    PRICED_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITED_FIELD_NUMBER: _ClassVar[int]
    RECENT_CALLS_FIELD_NUMBER: _ClassVar[int]
    RECENT_FAILED_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    cached_tokens: float
    call_seconds: float
    calls: float
    cap: float
    cap_time: _timestamp_pb2.Timestamp
    charged_usd: float
    checks: _containers.ScalarMap[str, float]
    endpoint_id: str
    failed: float
    input_tokens: float
    output_tokens: float
    output_tokens_timed: float
    paused_until: _timestamp_pb2.Timestamp
    poor: float
    priced: float
    rate_limited: float
    recent_calls: float
    recent_failed: float
    time: _timestamp_pb2.Timestamp
    def __init__(self, endpoint_id: _Optional[str] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., calls: _Optional[float] = ..., rate_limited: _Optional[float] = ..., failed: _Optional[float] = ..., poor: _Optional[float] = ..., recent_calls: _Optional[float] = ..., recent_failed: _Optional[float] = ..., priced: _Optional[float] = ..., input_tokens: _Optional[float] = ..., cached_tokens: _Optional[float] = ..., output_tokens: _Optional[float] = ..., charged_usd: _Optional[float] = ..., output_tokens_timed: _Optional[float] = ..., call_seconds: _Optional[float] = ..., checks: _Optional[_Mapping[str, float]] = ..., cap: _Optional[float] = ..., cap_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., paused_until: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RenewLeasesRequest(_message.Message):
    __slots__ = ["asks", "holder", "observations"]
    ASKS_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    asks: _containers.RepeatedCompositeFieldContainer[LeaseAsk]
    holder: str
    observations: _containers.RepeatedCompositeFieldContainer[LeaseObservation]
    def __init__(self, holder: _Optional[str] = ..., asks: _Optional[_Iterable[_Union[LeaseAsk, _Mapping]]] = ..., observations: _Optional[_Iterable[_Union[LeaseObservation, _Mapping]]] = ...) -> None: ...

class RenewLeasesResponse(_message.Message):
    __slots__ = ["central_endpoints", "grants", "owner_term", "term"]
    CENTRAL_ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    OWNER_TERM_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    central_endpoints: _containers.RepeatedScalarFieldContainer[str]
    grants: _containers.RepeatedCompositeFieldContainer[LeaseGrant]
    owner_term: int
    term: _duration_pb2.Duration
    def __init__(self, grants: _Optional[_Iterable[_Union[LeaseGrant, _Mapping]]] = ..., term: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., central_endpoints: _Optional[_Iterable[str]] = ..., owner_term: _Optional[int] = ...) -> None: ...

class SessionTurn(_message.Message):
    __slots__ = ["decide_time", "endpoint_id", "model", "request_id", "session_id", "tenant_id"]
    DECIDE_TIME_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    decide_time: _timestamp_pb2.Timestamp
    endpoint_id: str
    model: str
    request_id: str
    session_id: str
    tenant_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., model: _Optional[str] = ..., session_id: _Optional[str] = ..., request_id: _Optional[str] = ..., endpoint_id: _Optional[str] = ..., decide_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ShareObservationsRequest(_message.Message):
    __slots__ = ["batches", "replica_id", "session_turns"]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TURNS_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[ObservedBatch]
    replica_id: str
    session_turns: _containers.RepeatedCompositeFieldContainer[SessionTurn]
    def __init__(self, replica_id: _Optional[str] = ..., batches: _Optional[_Iterable[_Union[ObservedBatch, _Mapping]]] = ..., session_turns: _Optional[_Iterable[_Union[SessionTurn, _Mapping]]] = ...) -> None: ...

class ShareObservationsResponse(_message.Message):
    __slots__ = ["batches"]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    batches: int
    def __init__(self, batches: _Optional[int] = ...) -> None: ...

class TransferStateRequest(_message.Message):
    __slots__ = ["replica_id"]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    def __init__(self, replica_id: _Optional[str] = ...) -> None: ...

class TransferStateResponse(_message.Message):
    __slots__ = ["affinity", "conversations", "cooldowns", "outcomes"]
    AFFINITY_FIELD_NUMBER: _ClassVar[int]
    CONVERSATIONS_FIELD_NUMBER: _ClassVar[int]
    COOLDOWNS_FIELD_NUMBER: _ClassVar[int]
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    affinity: _containers.RepeatedCompositeFieldContainer[AffinityEntry]
    conversations: _containers.RepeatedCompositeFieldContainer[SessionTurn]
    cooldowns: _containers.RepeatedCompositeFieldContainer[CooldownEntry]
    outcomes: _containers.RepeatedCompositeFieldContainer[OutcomeEntry]
    def __init__(self, affinity: _Optional[_Iterable[_Union[AffinityEntry, _Mapping]]] = ..., conversations: _Optional[_Iterable[_Union[SessionTurn, _Mapping]]] = ..., cooldowns: _Optional[_Iterable[_Union[CooldownEntry, _Mapping]]] = ..., outcomes: _Optional[_Iterable[_Union[OutcomeEntry, _Mapping]]] = ...) -> None: ...
