from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

CALL_STATUS_CLIENT_CANCELLED: CallStatus
CALL_STATUS_FAILED: CallStatus
CALL_STATUS_INTERRUPTED: CallStatus
CALL_STATUS_OK: CallStatus
CALL_STATUS_UNSPECIFIED: CallStatus
CLIENT_API_CHAT_COMPLETIONS: ClientApi
CLIENT_API_MESSAGES: ClientApi
CLIENT_API_RESPONSES: ClientApi
CLIENT_API_UNSPECIFIED: ClientApi
DESCRIPTOR: _descriptor.FileDescriptor
ENDPOINT_API_ANTHROPIC: EndpointApi
ENDPOINT_API_OPENAI: EndpointApi
ENDPOINT_API_UNSPECIFIED: EndpointApi
HEDGE_MODE_DELAYED: HedgeMode
HEDGE_MODE_IMMEDIATE: HedgeMode
HEDGE_MODE_NONE: HedgeMode
HEDGE_MODE_UNSPECIFIED: HedgeMode
OUTCOME_CANCELLED: Outcome
OUTCOME_CLIENT_ERROR: Outcome
OUTCOME_CONNECT_ERROR: Outcome
OUTCOME_DROPPED: Outcome
OUTCOME_MALFORMED: Outcome
OUTCOME_OK: Outcome
OUTCOME_RATE_LIMITED: Outcome
OUTCOME_TIMEOUT: Outcome
OUTCOME_UNSPECIFIED: Outcome
OUTCOME_UPSTREAM_ERROR: Outcome

class ActivityRecord(_message.Message):
    __slots__ = ["api_key_id", "attempts", "caps", "client_api", "cost_capped", "cost_usd", "create_time", "duration", "endpoint_id", "error", "grant", "grant_request_id", "hedge", "http_status", "id", "model", "provider", "requested_model", "status", "stream", "tenant_id", "ttft", "usage"]
    API_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CAPS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_API_FIELD_NUMBER: _ClassVar[int]
    COST_CAPPED_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    GRANT_FIELD_NUMBER: _ClassVar[int]
    GRANT_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    HEDGE_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_MODEL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    TTFT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    api_key_id: str
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    caps: DecisionCaps
    client_api: ClientApi
    cost_capped: bool
    cost_usd: float
    create_time: _timestamp_pb2.Timestamp
    duration: _duration_pb2.Duration
    endpoint_id: str
    error: str
    grant: bytes
    grant_request_id: str
    hedge: HedgeInfo
    http_status: int
    id: str
    model: str
    provider: str
    requested_model: str
    status: CallStatus
    stream: bool
    tenant_id: str
    ttft: _duration_pb2.Duration
    usage: Usage
    def __init__(self, id: _Optional[str] = ..., create_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., tenant_id: _Optional[str] = ..., api_key_id: _Optional[str] = ..., model: _Optional[str] = ..., endpoint_id: _Optional[str] = ..., provider: _Optional[str] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., hedge: _Optional[_Union[HedgeInfo, _Mapping]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., cost_usd: _Optional[float] = ..., status: _Optional[_Union[CallStatus, str]] = ..., http_status: _Optional[int] = ..., stream: bool = ..., cost_capped: bool = ..., error: _Optional[str] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., ttft: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., grant: _Optional[bytes] = ..., caps: _Optional[_Union[DecisionCaps, _Mapping]] = ..., client_api: _Optional[_Union[ClientApi, str]] = ..., requested_model: _Optional[str] = ..., grant_request_id: _Optional[str] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ["cost_usd", "endpoint_id", "error", "hedge", "http_status", "outcome", "provider", "start_time", "ttft"]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HEDGE_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    TTFT_FIELD_NUMBER: _ClassVar[int]
    cost_usd: float
    endpoint_id: str
    error: str
    hedge: bool
    http_status: int
    outcome: Outcome
    provider: str
    start_time: _timestamp_pb2.Timestamp
    ttft: _duration_pb2.Duration
    def __init__(self, endpoint_id: _Optional[str] = ..., provider: _Optional[str] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., ttft: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., http_status: _Optional[int] = ..., hedge: bool = ..., cost_usd: _Optional[float] = ..., error: _Optional[str] = ..., start_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DecisionCaps(_message.Message):
    __slots__ = ["max_attempts_cost_usd", "max_cost_usd", "max_input_tokens", "max_output_tokens"]
    MAX_ATTEMPTS_COST_USD_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_USD_FIELD_NUMBER: _ClassVar[int]
    MAX_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    max_attempts_cost_usd: float
    max_cost_usd: float
    max_input_tokens: int
    max_output_tokens: int
    def __init__(self, max_input_tokens: _Optional[int] = ..., max_output_tokens: _Optional[int] = ..., max_cost_usd: _Optional[float] = ..., max_attempts_cost_usd: _Optional[float] = ...) -> None: ...

class Endpoint(_message.Message):
    __slots__ = ["api", "api_key_env", "base_url", "context_length", "estimated_cost_usd", "id", "price", "provider", "supported_parameters", "upstream_model"]
    API_FIELD_NUMBER: _ClassVar[int]
    API_KEY_ENV_FIELD_NUMBER: _ClassVar[int]
    BASE_URL_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_COST_USD_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    PRICE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    SUPPORTED_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_MODEL_FIELD_NUMBER: _ClassVar[int]
    api: EndpointApi
    api_key_env: str
    base_url: str
    context_length: int
    estimated_cost_usd: float
    id: str
    price: Price
    provider: str
    supported_parameters: _containers.RepeatedScalarFieldContainer[str]
    upstream_model: str
    def __init__(self, id: _Optional[str] = ..., provider: _Optional[str] = ..., base_url: _Optional[str] = ..., upstream_model: _Optional[str] = ..., api_key_env: _Optional[str] = ..., price: _Optional[_Union[Price, _Mapping]] = ..., context_length: _Optional[int] = ..., estimated_cost_usd: _Optional[float] = ..., api: _Optional[_Union[EndpointApi, str]] = ..., supported_parameters: _Optional[_Iterable[str]] = ...) -> None: ...

class Header(_message.Message):
    __slots__ = ["name", "value"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class HedgeInfo(_message.Message):
    __slots__ = ["loser_cost_usd", "loser_endpoint_id", "mode", "used", "winner_endpoint_id"]
    LOSER_COST_USD_FIELD_NUMBER: _ClassVar[int]
    LOSER_ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    WINNER_ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    loser_cost_usd: float
    loser_endpoint_id: str
    mode: HedgeMode
    used: bool
    winner_endpoint_id: str
    def __init__(self, used: bool = ..., mode: _Optional[_Union[HedgeMode, str]] = ..., winner_endpoint_id: _Optional[str] = ..., loser_endpoint_id: _Optional[str] = ..., loser_cost_usd: _Optional[float] = ...) -> None: ...

class Price(_message.Message):
    __slots__ = ["cache_write", "cache_write_1h", "cached_input", "input", "output"]
    CACHED_INPUT_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_1H_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    cache_write: float
    cache_write_1h: float
    cached_input: float
    input: float
    output: float
    def __init__(self, input: _Optional[float] = ..., cached_input: _Optional[float] = ..., output: _Optional[float] = ..., cache_write: _Optional[float] = ..., cache_write_1h: _Optional[float] = ...) -> None: ...

class PromptPrefix(_message.Message):
    __slots__ = ["hash", "tokens"]
    HASH_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    hash: int
    tokens: int
    def __init__(self, hash: _Optional[int] = ..., tokens: _Optional[int] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ["cache_write_1h_tokens", "cache_write_tokens", "cached_input_tokens", "cost_usd", "input_tokens", "output_tokens", "reported"]
    CACHED_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_1H_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REPORTED_FIELD_NUMBER: _ClassVar[int]
    cache_write_1h_tokens: int
    cache_write_tokens: int
    cached_input_tokens: int
    cost_usd: float
    input_tokens: int
    output_tokens: int
    reported: bool
    def __init__(self, input_tokens: _Optional[int] = ..., cached_input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ..., reported: bool = ..., cache_write_tokens: _Optional[int] = ..., cache_write_1h_tokens: _Optional[int] = ...) -> None: ...

class EndpointApi(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class HedgeMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class CallStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ClientApi(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
