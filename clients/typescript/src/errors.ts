// Errors a caller of the decider handles, one class per thing it can do about them.

import { Code, ConnectError } from "@connectrpc/connect";
import type { Refusal } from "./gen/switchboard/v1/router_pb.js";
import { RefusalReason } from "./gen/switchboard/v1/router_pb.js";

/** Base of every error the client throws; code is the gRPC status code, if one. */
export class SwitchboardError extends Error {
  constructor(message: string, readonly code?: Code, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The decider does not know the caller's token, or the identity's API key or tenant. */
export class Unauthenticated extends SwitchboardError {}
/** The caller may not do this: another tenant's request, or an RPC its role may not call. */
export class PermissionDenied extends SwitchboardError {}
/** The catalog has no such model. */
export class ModelNotFound extends SwitchboardError {}
/** A field of the request is malformed; the message names it. */
export class InvalidRequest extends SwitchboardError {}
/** No endpoint can take the request. */
export class NoEndpoint extends SwitchboardError {}
/** The call's deadline passed, or its signal aborted it. */
export class DeadlineExceeded extends SwitchboardError {}
/** The decider cannot be reached or is starting; retry with back-off. */
export class Unavailable extends SwitchboardError {}

/**
 * The decider refused to reserve capacity: the tenant's own limit, or every
 * endpoint's. retryAfterMs is how long to wait (undefined when unknown),
 * refusalCode the decider's stable reason (rate_limit, daily_quota,
 * concurrency, provider_paused...), retryable whether waiting can help.
 */
export class RateLimited extends SwitchboardError {
  readonly retryAfterMs?: number;
  readonly refusalCode: string;
  readonly retryable: boolean;
  constructor(readonly refusal: Refusal) {
    super(`refused (${refusal.code}): ${refusal.message}`);
    const d = refusal.retryAfter;
    this.retryAfterMs = d ? Number(d.seconds) * 1000 + d.nanos / 1e6 : undefined;
    this.refusalCode = refusal.code;
    this.retryable = refusal.reason === RefusalReason.RETRYABLE_CAPACITY || refusal.reason === RefusalReason.RETRYABLE_OVERLOAD;
  }
}

/**
 * Thrown by the caller's send function for a provider's HTTP error answer. A
 * 429, a 5xx or 529 is tried on the next endpoint, as are 401/402/403/404
 * (this endpoint's credential or mapping); any other 4xx is the request's own
 * fault and is thrown to the caller at once.
 */
export class ProviderError extends SwitchboardError {
  constructor(readonly status: number, message = "", readonly headers: Record<string, string> = {}, readonly errorCode = "") {
    super(message || `provider answered HTTP ${status}`);
  }
}

/** Every endpoint Decide offered failed; errors holds each attempt's error, in order. */
export class AllEndpointsFailed extends SwitchboardError {
  constructor(readonly errors: unknown[]) {
    super("every endpoint failed: " + errors.map(String).join("; "));
  }
}

const byCode: Partial<Record<Code, new (m: string, c?: Code, o?: ErrorOptions) => SwitchboardError>> = {
  [Code.Unauthenticated]: Unauthenticated,
  [Code.PermissionDenied]: PermissionDenied,
  [Code.NotFound]: ModelNotFound,
  [Code.InvalidArgument]: InvalidRequest,
  [Code.FailedPrecondition]: NoEndpoint,
  [Code.ResourceExhausted]: NoEndpoint,
  [Code.DeadlineExceeded]: DeadlineExceeded,
  [Code.Unavailable]: Unavailable,
};

/** The typed error of a failed RPC. */
export function fromRpcError(err: unknown): SwitchboardError {
  if (err instanceof SwitchboardError) return err;
  const ce = ConnectError.from(err);
  const cls = byCode[ce.code] ?? SwitchboardError;
  return new cls(`${Code[ce.code]}: ${ce.rawMessage}`, ce.code, { cause: err });
}
