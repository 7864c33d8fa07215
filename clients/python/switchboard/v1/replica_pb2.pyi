from switchboard.v1 import edge_pb2 as _edge_pb2
from switchboard.v1 import operator_pb2 as _operator_pb2
from switchboard.v1 import router_pb2 as _router_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

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
