"""Errors a caller of the decider handles, one class per thing it can do about them."""

from __future__ import annotations

from typing import Optional

import grpc


class SwitchboardError(Exception):
    """Base of every error the client raises. code is the gRPC status code, if one."""

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None):
        super().__init__(message)
        self.code = code


class Unauthenticated(SwitchboardError):
    """The decider does not know the caller's token, or the identity's API key or tenant."""


class PermissionDenied(SwitchboardError):
    """The caller may not do this: another tenant's request, or an RPC its role may not call."""


class ModelNotFound(SwitchboardError):
    """The catalog has no such model."""


class InvalidRequest(SwitchboardError):
    """A field of the request is malformed; the message names it."""


class NoEndpoint(SwitchboardError):
    """No endpoint can take the request (every one filtered out, paused or over its limits)."""


class DeadlineExceeded(SwitchboardError):
    """The call's deadline passed."""


class Unavailable(SwitchboardError):
    """The decider cannot be reached or is starting; retry with back-off."""


class RateLimited(SwitchboardError):
    """The decider refused to reserve capacity: the tenant's own limit, or every endpoint's.

    retry_after is how long to wait (seconds, None when unknown); refusal_code the
    decider's stable reason (rate_limit, daily_quota, concurrency, provider_paused...);
    retryable whether waiting can help at all.
    """

    def __init__(self, message: str, retry_after: Optional[float], refusal_code: str, retryable: bool, refusal=None):
        super().__init__(message)
        self.retry_after = retry_after
        self.refusal_code = refusal_code
        self.retryable = retryable
        self.refusal = refusal


class ProviderError(SwitchboardError):
    """Raised by the caller's send function for a provider's HTTP error answer.

    The client classifies it as the edge does: a 429, a 5xx or 529 is tried on the next
    endpoint, as are 401/402/403/404 (this endpoint's credential or mapping); any other
    4xx is the request's own fault and is raised to the caller at once.
    """

    def __init__(self, status: int, message: str = "", headers: Optional[dict] = None, error_code: str = ""):
        super().__init__(message or f"provider answered HTTP {status}")
        self.status = status
        self.headers = dict(headers or {})
        self.error_code = error_code


class AllEndpointsFailed(SwitchboardError):
    """Every endpoint Decide offered failed; errors holds each attempt's error, in order."""

    def __init__(self, errors: list):
        super().__init__("every endpoint failed: " + "; ".join(str(e) for e in errors))
        self.errors = errors


_BY_CODE = {
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.NOT_FOUND: ModelNotFound,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequest,
    grpc.StatusCode.FAILED_PRECONDITION: NoEndpoint,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.RESOURCE_EXHAUSTED: NoEndpoint,
}


def from_rpc_error(err: grpc.RpcError) -> SwitchboardError:
    """The typed error of a failed RPC."""
    code = err.code() if hasattr(err, "code") else None
    details = err.details() if hasattr(err, "details") else str(err)
    cls = _BY_CODE.get(code, SwitchboardError)
    out = cls(f"{code.name if code else 'error'}: {details}", code)
    out.__cause__ = err
    return out
