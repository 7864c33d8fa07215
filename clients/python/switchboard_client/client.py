"""Router: one chat request through the decider, dispatched by the caller's own HTTP client.

`Router.call` does the whole of what an edge does around a provider call:

1. Decide, with reserve, the caller's identity and the request's token estimate and
   prefixes (prompt.figures, the edge's rules);
2. the caller's `send(attempt)` calls the chosen endpoint with its own HTTP client;
3. on a retryable failure before the caller had any answer, the next endpoint of the
   decision is reserved (Reserve) and tried;
4. whatever happened — an answer, every endpoint failing, the caller's code raising or
   being interrupted — the reservations are reconciled and the request's timings and
   activity record reported (ReportCall), so the tenant's capacity is released at once
   and the router learns each endpoint's speed.

The generated stubs stay available: `Router.stub` is the RouterService stub, and
`Router.metadata()` the call metadata carrying the caller's token.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, TypeVar

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from switchboard.v1 import common_pb2, router_pb2, router_pb2_grpc

from . import errors
from .prompt import figures

log = logging.getLogger("switchboard_client")

T = TypeVar("T")

# Provider HTTP statuses after which the next endpoint is tried (the edge's
# failure classes: capacity, overload, and this endpoint's own policy).
_RETRY_NEXT = {401, 402, 403, 404, 408, 409, 425, 429, 500, 502, 503, 504, 529}


class TokenFile:
    """A bearer token read from a file, read again when the file changes (as the edge's --decider-token-file)."""

    def __init__(self, path: str):
        self.path = path
        self._mtime: Optional[float] = None
        self._token = ""
        self.token()

    def token(self) -> str:
        m = os.stat(self.path).st_mtime
        if m != self._mtime:
            with open(self.path, encoding="utf-8") as f:
                tok = f.read().strip()
            if not tok:
                raise ValueError(f"token file {self.path} is empty")
            self._token, self._mtime = tok, m
        return self._token


def loopback(target: str) -> bool:
    """Whether target (host:port) is on this machine: localhost, 127.0.0.0/8 or ::1."""
    host = target.rsplit(":", 1)[0].strip("[]") if ":" in target else target
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def channel(target: str, *, ca_file: Optional[str] = None, cert_file: Optional[str] = None,
            key_file: Optional[str] = None, server_name: Optional[str] = None, plaintext: bool = False) -> grpc.Channel:
    """A channel to the decider, as the edge's --decider-* flags make it: any TLS option turns
    TLS on (without ca_file, the system's roots verify the decider), cert_file and key_file
    add a client certificate; a target off this machine needs TLS unless plaintext says so."""
    tls = bool(ca_file or cert_file or key_file or server_name)
    if plaintext and tls:
        raise ValueError("plaintext and TLS options together")
    if not tls:
        if not plaintext and not loopback(target):
            raise ValueError(f"{target} is not a loopback address: connect with TLS (ca_file, and cert_file with "
                             "key_file for mutual TLS) or choose plaintext=True explicitly")
        return grpc.insecure_channel(target)
    if bool(cert_file) != bool(key_file):
        raise ValueError("cert_file and key_file go together")

    def read(p: Optional[str]) -> Optional[bytes]:
        if not p:
            return None
        with open(p, "rb") as f:
            return f.read()

    creds = grpc.ssl_channel_credentials(read(ca_file), read(key_file), read(cert_file))
    opts = [("grpc.ssl_target_name_override", server_name)] if server_name else []
    return grpc.secure_channel(target, creds, options=opts)


@dataclass
class Usage:
    """What the provider reported of one answer."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0

    @classmethod
    def from_openai(cls, usage: Optional[Mapping[str, Any]]) -> Optional["Usage"]:
        """The usage object of an OpenAI chat completion (or its last stream chunk)."""
        if not usage:
            return None
        details = usage.get("prompt_tokens_details") or {}
        return cls(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
                   int(details.get("cached_tokens") or 0))


@dataclass
class Attempt:
    """One try of one endpoint, handed to the caller's send function.

    url, headers and body are what to POST (the body with the endpoint's upstream model
    and, for a stream, stream_options.include_usage); json is the body encoded. Call
    first_token() when the first token arrives (a stream's first content chunk) and set
    usage from the provider's answer; raise errors.ProviderError for an HTTP error answer.
    An OSError (a connection refused or reset, a timeout: urllib's URLError, requests'
    ConnectionError) before the first token is tried on the next endpoint too.
    """

    endpoint: Any
    number: int
    url: str
    headers: dict
    body: dict
    stream: bool
    deadline: Optional[float]
    start: float = field(default_factory=time.time)
    ttft: Optional[float] = None
    usage: Optional[Usage] = None

    @property
    def json(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def first_token(self) -> None:
        """Marks the first token's arrival (once; later calls change nothing)."""
        if self.ttft is None:
            self.ttft = time.time() - self.start


@dataclass
class Result:
    """What Router.call returns: the send function's value and how the request went."""

    value: Any
    request_id: str
    endpoint_id: str
    provider: str
    attempts: int
    usage: Optional[Usage]
    cost_usd: float
    decision: Any


def _duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(max(seconds, 0) * 1e9))
    return d


def _timestamp(at: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(at * 1e9))
    return ts


def _cost(ep, usage: Optional[Usage]) -> float:
    if usage is None:
        return 0.0
    p = ep.price
    cached = min(usage.cached_input_tokens, usage.input_tokens)
    cached_price = p.cached_input if p.cached_input > 0 else p.input
    return ((usage.input_tokens - cached) * p.input + cached * cached_price + usage.output_tokens * p.output) / 1e6


def _classify(status: int, error_code: str) -> int:
    """The refusal class of a provider's HTTP error (the edge's failure classes)."""
    r = router_pb2
    policy_codes = ("insufficient_quota", "billing_hard_limit_reached", "spend_limit", "account_deactivated")
    if status == 429:
        return r.REFUSAL_REASON_NON_RETRYABLE_POLICY if error_code in policy_codes else r.REFUSAL_REASON_RETRYABLE_CAPACITY
    if status >= 500 or status in (408, 425, 529):
        return r.REFUSAL_REASON_RETRYABLE_OVERLOAD
    if status in (401, 402, 403, 404):
        return r.REFUSAL_REASON_NON_RETRYABLE_POLICY
    return r.REFUSAL_REASON_NON_RETRYABLE_REQUEST


class Router:
    """A caller of the decider's RouterService (a catalog caller of role service).

    target is host:port; token (or token_file, re-read when it changes) the caller's
    bearer token; ca_file, cert_file, key_file, server_name and plaintext set up the
    connection as the edge's --decider-* flags do (see channel). timeout bounds each RPC, in seconds. apis are the endpoint
    APIs the caller's send function speaks (default: OpenAI chat completions); an
    endpoint of another API (an Anthropic Messages one) is passed over for the next.
    """

    def __init__(self, target: str, *, token: Optional[str] = None, token_file: Optional[str] = None,
                 ca_file: Optional[str] = None, cert_file: Optional[str] = None, key_file: Optional[str] = None,
                 server_name: Optional[str] = None, plaintext: bool = False, timeout: float = 10.0, region: str = "",
                 apis: tuple = (common_pb2.ENDPOINT_API_UNSPECIFIED, common_pb2.ENDPOINT_API_OPENAI),
                 ch: Optional[grpc.Channel] = None):
        if token and token_file:
            raise ValueError("give token or token_file, not both")
        self._token = token
        self._token_file = TokenFile(token_file) if token_file else None
        self.channel = ch or channel(target, ca_file=ca_file, cert_file=cert_file, key_file=key_file,
                                     server_name=server_name, plaintext=plaintext)
        self.stub = router_pb2_grpc.RouterServiceStub(self.channel)
        self.timeout = timeout
        self.region = region
        self.apis = apis

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "Router":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def metadata(self) -> list:
        """The call metadata of every RPC: the caller's bearer token."""
        tok = self._token_file.token() if self._token_file else self._token
        return [("authorization", "Bearer " + tok)] if tok else []

    def _rpc(self, method, request, timeout: Optional[float] = None):
        try:
            return method(request, metadata=self.metadata(), timeout=timeout or self.timeout)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from e

    @staticmethod
    def identity(*, tenant_id: str = "", api_key: str = "", api_key_sha256: str = "", app: str = "",
                 environment: str = "", workload_class: int = 0) -> router_pb2.Identity:
        """Who a request is for: a tenant the caller serves, or a client's API key
        (hashed here; the key itself never leaves the process)."""
        if api_key:
            api_key_sha256 = hashlib.sha256(api_key.encode("utf-8")).hexdigest()
        if not tenant_id and not api_key_sha256:
            raise ValueError("an identity needs tenant_id, api_key or api_key_sha256")
        return router_pb2.Identity(tenant_id=tenant_id, api_key_sha256=api_key_sha256, app=app,
                                   environment=environment, workload_class=workload_class)

    def decide(self, body: Mapping[str, Any], identity: router_pb2.Identity, *, request_id: str = "",
               provider: Optional[router_pb2.ProviderPreferences] = None, session_id: str = "",
               reserve: bool = True, timeout: Optional[float] = None) -> router_pb2.DecideResponse:
        """Decide for an OpenAI chat completions body; raises errors.RateLimited when
        reserve was asked and refused, and the typed error of any failed RPC."""
        f = figures(body)
        req = router_pb2.DecideRequest(
            request_id=request_id or "req-" + uuid.uuid4().hex, identity=identity, model=str(body.get("model", "")),
            tokens=router_pb2.TokenEstimate(
                input_tokens=f.input_tokens, max_output_tokens=f.max_output_tokens,
                prefixes=[common_pb2.PromptPrefix(hash=p.hash, tokens=p.tokens) for p in f.prefixes]),
            stream=bool(body.get("stream")), provider=provider, region=self.region, reserve=reserve,
            session_id=session_id)
        req.idempotency_key = req.request_id
        resp = self._rpc(self.stub.Decide, req, timeout)
        if resp.HasField("refusal"):
            raise _refused(resp.refusal)
        return resp

    def call(self, body: Mapping[str, Any], send: Callable[[Attempt], T], identity: router_pb2.Identity, *,
             provider: Optional[router_pb2.ProviderPreferences] = None, session_id: str = "",
             deadline: Optional[float] = None) -> Result:
        """Decide, send, fall back, and report: see the module's documentation.

        deadline is a time.time() by which the whole request must end (each RPC and
        each attempt gets what is left). send's value is returned in Result.value.
        """
        created = time.time()
        stream = bool(body.get("stream"))
        resp = self.decide(body, identity, provider=provider, session_id=session_id, timeout=self._left(deadline))
        f = figures(body)
        run = _Run(self, body, resp, identity, created, stream, f)
        try:
            value = run.dispatch(send, deadline)
        except BaseException as e:  # the caller's code raised, or was interrupted: still report
            run.finish(error=e)
            raise
        run.finish()
        return Result(value=value, request_id=resp.request_id, endpoint_id=run.served.endpoint.id,
                      provider=run.served.endpoint.provider, attempts=len(run.attempts), usage=run.served.usage,
                      cost_usd=run.cost, decision=resp.decision)

    def _left(self, deadline: Optional[float]) -> Optional[float]:
        if deadline is None:
            return None
        left = deadline - time.time()
        if left <= 0:
            raise errors.DeadlineExceeded("the request's deadline passed", grpc.StatusCode.DEADLINE_EXCEEDED)
        return min(left, self.timeout)


def _refused(r) -> errors.RateLimited:
    after = r.retry_after.ToNanoseconds() / 1e9 if r.HasField("retry_after") else None
    retryable = r.reason in (router_pb2.REFUSAL_REASON_RETRYABLE_CAPACITY, router_pb2.REFUSAL_REASON_RETRYABLE_OVERLOAD)
    return errors.RateLimited(f"refused ({r.code}): {r.message}", after, r.code, retryable, r)


class _Run:
    """One request's attempts and what is reported of them."""

    def __init__(self, router: Router, body, resp, identity, created: float, stream: bool, f):
        self.router, self.body, self.resp, self.identity = router, body, resp, identity
        self.created, self.stream, self.figures = created, stream, f
        self.attempts: list[tuple] = []  # attempt, reservation, outcome, http status, error, provider code, failure class, headers
        self.served: Optional[Attempt] = None
        self.unused: list = []  # reservations of endpoints passed over
        self.cost = 0.0

    def _attempt(self, ep, n: int, deadline) -> Attempt:
        body = dict(self.body)
        body["model"] = ep.upstream_model or self.resp.model
        if self.stream:
            opts = dict(body.get("stream_options") or {})
            opts["include_usage"] = True
            body["stream_options"] = opts
        headers = {"Content-Type": "application/json"}
        if ep.api_key_env and os.environ.get(ep.api_key_env):
            headers["Authorization"] = "Bearer " + os.environ[ep.api_key_env]
        return Attempt(endpoint=ep, number=n, url=ep.base_url.rstrip("/") + "/chat/completions", headers=headers,
                       body=body, stream=self.stream, deadline=deadline)

    def _reserve(self, ep, n: int, previous_failure: int, deadline):
        """A reservation on a fallback endpoint; None when refused."""
        r = self.router._rpc(self.router.stub.Reserve, router_pb2.ReserveRequest(
            request_id=self.resp.request_id, idempotency_key=f"{self.resp.request_id}/{n}",
            identity=self.identity, model=self.resp.model, endpoint_id=ep.id, demand=self.resp.demand,
            attempt=n, previous_failure=previous_failure), self.router._left(deadline))
        return r.reservation if r.admitted else None

    def dispatch(self, send, deadline):
        endpoints = [self.resp.endpoint] + list(self.resp.fallbacks)
        failures: list[Exception] = []
        previous = 0
        for n, ep in enumerate(endpoints, start=1):
            reservation = self.resp.reservation if n == 1 else None
            if ep.api not in self.router.apis:
                if reservation is not None and reservation.reservation_id:
                    self.unused.append(reservation)
                continue
            if n > 1:
                reservation = self._reserve(ep, n, previous, deadline)
                if reservation is None:
                    continue
            a = self._attempt(ep, n, deadline)
            try:
                value = send(a)
            except errors.ProviderError as e:
                cls = _classify(e.status, e.error_code)
                outcome = common_pb2.OUTCOME_RATE_LIMITED if e.status == 429 else (
                    common_pb2.OUTCOME_CLIENT_ERROR if cls == router_pb2.REFUSAL_REASON_NON_RETRYABLE_REQUEST
                    else common_pb2.OUTCOME_UPSTREAM_ERROR)
                self.attempts.append((a, reservation, outcome, e.status, str(e), e.error_code, cls, e.headers))
                failures.append(e)
                if a.ttft is not None or e.status not in _RETRY_NEXT:
                    raise
                previous = cls
                continue
            except OSError as e:  # the connection (urllib's URLError, requests' ConnectionError...) or a timeout
                timeout = isinstance(e, TimeoutError) or isinstance(getattr(e, "reason", None), TimeoutError)
                outcome = common_pb2.OUTCOME_TIMEOUT if timeout else common_pb2.OUTCOME_CONNECT_ERROR
                self.attempts.append((a, reservation, outcome, 0, str(e), "", router_pb2.REFUSAL_REASON_RETRYABLE_OVERLOAD, {}))
                failures.append(e)
                if a.ttft is not None:
                    raise
                previous = router_pb2.REFUSAL_REASON_RETRYABLE_OVERLOAD
                continue
            except BaseException as e:
                self.attempts.append((a, reservation, common_pb2.OUTCOME_CANCELLED, 0, f"caller: {type(e).__name__}", "", 0, {}))
                raise
            if a.ttft is None:
                a.ttft = time.time() - a.start  # a whole answer: its first token came with its last
            self.attempts.append((a, reservation, common_pb2.OUTCOME_OK, 200, "", "", 0, {}))
            self.served = a
            return value
        if not failures:
            raise errors.NoEndpoint("every fallback endpoint's reservation was refused")
        raise errors.AllEndpointsFailed(failures)

    def finish(self, error: Optional[BaseException] = None) -> None:
        """Reconciles every reservation and reports the request (ReportCall); a failure
        to report is logged, never raised over the request's own outcome."""
        pb = common_pb2
        now = time.time()
        reconciles = [router_pb2.ReconcileRequest(reservation_id=r.reservation_id, usage=pb.Usage(),
                                                  outcome=pb.OUTCOME_CANCELLED) for r in self.unused]
        attempts = []
        for a, reservation, outcome, http, err, code, cls, headers in self.attempts:
            usage = a.usage if outcome in (pb.OUTCOME_OK, pb.OUTCOME_CANCELLED) else None
            if reservation is not None and reservation.reservation_id:
                u = pb.Usage()
                if usage is not None:
                    u = pb.Usage(input_tokens=usage.input_tokens, cached_input_tokens=usage.cached_input_tokens,
                                 output_tokens=usage.output_tokens, cost_usd=_cost(a.endpoint, usage), reported=True)
                reconciles.append(router_pb2.ReconcileRequest(
                    reservation_id=reservation.reservation_id, usage=u, outcome=outcome, failure=cls,
                    provider_error_code=code,
                    rate_limit_headers=[pb.Header(name=k.lower(), value=str(v)) for k, v in headers.items()
                                        if k.lower().startswith(("x-ratelimit", "retry-after"))]))
            at = pb.Attempt(endpoint_id=a.endpoint.id, provider=a.endpoint.provider, outcome=outcome, http_status=http,
                            error=err[:200], start_time=_timestamp(a.start), cost_usd=_cost(a.endpoint, usage))
            if a.ttft is not None:
                at.ttft.CopyFrom(_duration(a.ttft))
            attempts.append(at)
        last = self.served or (self.attempts[-1][0] if self.attempts else None)
        usage = last.usage if last is not None else None
        self.cost = _cost(last.endpoint, usage) if last is not None else 0.0
        caps = self.resp.caps
        if caps.max_cost_usd > 0:
            self.cost = min(self.cost, caps.max_cost_usd)
        if self.served is not None:
            status, http = pb.CALL_STATUS_OK, 200
        elif error is not None and not isinstance(error, (errors.ProviderError, errors.AllEndpointsFailed, OSError)):
            status = pb.CALL_STATUS_INTERRUPTED if last is not None and last.ttft is not None else pb.CALL_STATUS_CLIENT_CANCELLED
            http = 0
        else:
            status, http = pb.CALL_STATUS_FAILED, (self.attempts[-1][3] if self.attempts else 0)
        rec = pb.ActivityRecord(
            id=self.resp.request_id, create_time=_timestamp(self.created), tenant_id=self.resp.identity.tenant_id,
            api_key_id=self.resp.identity.api_key_id, model=self.resp.model, requested_model=str(self.body.get("model", "")),
            endpoint_id=last.endpoint.id if last else "", provider=last.endpoint.provider if last else "",
            attempts=attempts, cost_usd=self.cost, status=status, http_status=http, stream=self.stream,
            error=(str(error)[:200] if error is not None and status != pb.CALL_STATUS_OK else ""),
            duration=_duration(now - self.created), grant=self.resp.grant, caps=caps,
            client_api=pb.CLIENT_API_CHAT_COMPLETIONS)
        if usage is not None:
            rec.usage.CopyFrom(pb.Usage(input_tokens=usage.input_tokens, cached_input_tokens=usage.cached_input_tokens,
                                        output_tokens=usage.output_tokens, cost_usd=self.cost, reported=True))
        if last is not None and last.ttft is not None:
            rec.ttft.CopyFrom(_duration(last.ttft))
        req = router_pb2.ReportCallRequest(
            record=rec, reconciles=reconciles, prompt_tokens=self.figures.input_tokens,
            prefixes=[pb.PromptPrefix(hash=p.hash, tokens=p.tokens) for p in self.figures.prefixes])
        for attempt in range(3):
            try:
                self.router._rpc(self.router.stub.ReportCall, req)
                return
            except errors.SwitchboardError as e:
                if attempt == 2 or not isinstance(e, (errors.Unavailable, errors.DeadlineExceeded)):
                    log.warning("request %s not reported: %s (its reservations expire on their own)", self.resp.request_id, e)
                    return
                time.sleep(0.2 * (attempt + 1))
