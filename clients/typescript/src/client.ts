// Router: one chat request through the decider, dispatched by the caller's own
// HTTP client. Router.call does what an edge does around a provider call:
// Decide (with reserve, the identity, the token estimate and prefixes by the
// edge's rules), the caller's send(attempt) on the chosen endpoint, the next
// endpoint (reserved with Reserve) after a retryable failure before any
// answer, and — whatever happened, the caller's code throwing or its signal
// aborting included — the reconciliation of every reservation and the
// request's timings and activity record (ReportCall). The generated client
// stays available as Router.rpc.

import { readFileSync, statSync } from "node:fs";
import { randomUUID, createHash } from "node:crypto";
import { isIP } from "node:net";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";

import {
  ActivityRecordSchema, AttemptSchema, CallStatus, ClientApi, EndpointApi, HeaderSchema, Outcome, PromptPrefixSchema, UsageSchema,
  type Endpoint,
} from "./gen/switchboard/v1/common_pb.js";
import {
  DecideRequestSchema, IdentitySchema, ReconcileRequestSchema, RefusalReason, ReportCallRequestSchema, ReserveRequestSchema,
  RouterService, type DecideResponse, type Identity, type ProviderPreferencesSchema, type Reservation,
} from "./gen/switchboard/v1/router_pb.js";
import {
  AllEndpointsFailed, DeadlineExceeded, NoEndpoint, ProviderError, RateLimited, SwitchboardError, fromRpcError,
} from "./errors.js";
import { figures, type PromptFigures } from "./prompt.js";

/** A bearer token read from a file, read again when the file changes (as the edge's --decider-token-file). */
export class TokenFile {
  private mtime = -1;
  private value = "";
  constructor(readonly path: string) {
    this.token();
  }
  token(): string {
    const m = statSync(this.path).mtimeMs;
    if (m !== this.mtime) {
      const t = readFileSync(this.path, "utf8").trim();
      if (!t) throw new Error(`token file ${this.path} is empty`);
      this.value = t;
      this.mtime = m;
    }
    return this.value;
  }
}

/**
 * How to reach the decider, as the edge's --decider-* flags say it: any TLS
 * option turns TLS on (without caFile, Node's roots verify the decider), a
 * target off this machine needs TLS unless plaintext says so.
 */
export interface RouterOptions {
  /** host:port of the decider. */
  target: string;
  /** The caller's bearer token, or tokenFile (re-read when it changes). */
  token?: string;
  tokenFile?: string;
  /** PEM files: the CA to verify the decider with (TLS when set), and a client certificate. */
  caFile?: string;
  certFile?: string;
  keyFile?: string;
  /** The name the decider's certificate must carry, when not the target's host. */
  serverName?: string;
  /** Connects to a decider off this machine without TLS. */
  plaintext?: boolean;
  /** Bounds each RPC, in milliseconds. Defaults to 10 s. */
  timeoutMs?: number;
  /**
   * The endpoint APIs the caller's send function speaks (default: OpenAI chat
   * completions); an endpoint of another API (an Anthropic Messages one) is
   * passed over for the next.
   */
  apis?: EndpointApi[];
  region?: string;
}

/** Whether target (host:port) is on this machine: localhost, 127.0.0.0/8 or ::1. */
export function loopback(target: string): boolean {
  const host = target.includes(":") ? target.slice(0, target.lastIndexOf(":")).replace(/^\[|\]$/g, "") : target;
  if (host === "localhost" || host === "::1") return true;
  if (isIP(host) === 4) return host.startsWith("127.");
  return false;
}

/** What the provider reported of one answer. */
export interface Usage {
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
}

/** The usage object of an OpenAI chat completion (or its last stream chunk). */
export function usageFromOpenAI(u: any): Usage | undefined {
  if (!u) return undefined;
  return {
    inputTokens: Number(u.prompt_tokens ?? 0), outputTokens: Number(u.completion_tokens ?? 0),
    cachedInputTokens: Number(u.prompt_tokens_details?.cached_tokens ?? 0),
  };
}

/**
 * One try of one endpoint, handed to the caller's send function: POST body
 * (json) to url with headers. Call firstToken() when the first token arrives,
 * set usage from the answer, throw ProviderError for an HTTP error answer;
 * signal aborts with the request's.
 */
export class Attempt {
  readonly start = Date.now();
  ttftMs?: number;
  usage?: Usage;
  constructor(
    readonly endpoint: Endpoint, readonly number: number, readonly url: string, readonly headers: Record<string, string>,
    readonly body: Record<string, unknown>, readonly stream: boolean, readonly signal?: AbortSignal,
  ) {}
  get json(): string {
    return JSON.stringify(this.body);
  }
  /** Marks the first token's arrival (once). */
  firstToken(): void {
    if (this.ttftMs === undefined) this.ttftMs = Date.now() - this.start;
  }
}

/** What Router.call returns: the send function's value and how the request went. */
export interface Result<T> {
  value: T;
  requestId: string;
  endpointId: string;
  provider: string;
  attempts: number;
  usage?: Usage;
  costUsd: number;
  decision: DecideResponse["decision"];
}

export type IdentityInit = { tenantId?: string; apiKey?: string; apiKeySha256?: string; app?: string; environment?: string };

/** Options of one call. */
export interface CallOptions {
  provider?: MessageInitShape<typeof ProviderPreferencesSchema>;
  sessionId?: string;
  /** Aborts the request: the current attempt's signal (its report is still sent). */
  signal?: AbortSignal;
  /** Bounds the whole request, in milliseconds: past it, DeadlineExceeded (the request is reported). */
  timeoutMs?: number;
}

const retryNext = new Set([401, 402, 403, 404, 408, 409, 425, 429, 500, 502, 503, 504, 529]);
const policyCodes = new Set(["insufficient_quota", "billing_hard_limit_reached", "spend_limit", "account_deactivated"]);

function classify(status: number, code: string): RefusalReason {
  if (status === 429) return policyCodes.has(code) ? RefusalReason.NON_RETRYABLE_POLICY : RefusalReason.RETRYABLE_CAPACITY;
  if (status >= 500 || status === 408 || status === 425) return RefusalReason.RETRYABLE_OVERLOAD;
  if ([401, 402, 403, 404].includes(status)) return RefusalReason.NON_RETRYABLE_POLICY;
  return RefusalReason.NON_RETRYABLE_REQUEST;
}

function cost(ep: Endpoint, u?: Usage): number {
  if (!u) return 0;
  const p = ep.price;
  if (!p) return 0;
  const cached = Math.min(u.cachedInputTokens, u.inputTokens);
  const cachedPrice = p.cachedInput > 0 ? p.cachedInput : p.input;
  return ((u.inputTokens - cached) * p.input + cached * cachedPrice + u.outputTokens * p.output) / 1e6;
}

function isConnectFailure(e: unknown): boolean {
  const code = (e as any)?.cause?.code ?? (e as any)?.code;
  return ["ECONNREFUSED", "ECONNRESET", "ENOTFOUND", "EHOSTUNREACH", "UND_ERR_CONNECT_TIMEOUT", "UND_ERR_SOCKET"].includes(code);
}

interface Tried {
  attempt: Attempt;
  reservation?: Reservation;
  outcome: Outcome;
  http: number;
  error: string;
  code: string;
  failure: RefusalReason;
  headers: Record<string, string>;
}

/** A caller of the decider's RouterService (a catalog caller of role service). */
export class Router {
  /** The generated client of RouterService: every RPC, with the caller's token. */
  readonly rpc: Client<typeof RouterService>;
  private readonly timeoutMs: number;
  private readonly region: string;
  private readonly apis: EndpointApi[];

  constructor(opts: RouterOptions, transport?: Transport) {
    if (opts.token && opts.tokenFile) throw new Error("give token or tokenFile, not both");
    const file = opts.tokenFile ? new TokenFile(opts.tokenFile) : undefined;
    const auth: Interceptor = (next) => (req) => {
      const tok = file ? file.token() : opts.token;
      if (tok) req.header.set("authorization", `Bearer ${tok}`);
      return next(req);
    };
    const tls = Boolean(opts.caFile || opts.certFile || opts.keyFile || opts.serverName);
    if (tls && opts.plaintext) throw new Error("plaintext and TLS options together");
    if (Boolean(opts.certFile) !== Boolean(opts.keyFile)) throw new Error("certFile and keyFile go together");
    if (!tls && !opts.plaintext && !transport && !loopback(opts.target)) {
      throw new Error(`${opts.target} is not a loopback address: connect with TLS (caFile, and certFile with keyFile for mutual TLS) or choose plaintext: true explicitly`);
    }
    transport ??= createGrpcTransport({
      baseUrl: `${tls ? "https" : "http"}://${opts.target}`,
      interceptors: [auth],
      nodeOptions: tls ? {
        ca: opts.caFile ? readFileSync(opts.caFile) : undefined, cert: opts.certFile ? readFileSync(opts.certFile) : undefined,
        key: opts.keyFile ? readFileSync(opts.keyFile) : undefined, servername: opts.serverName,
      } : undefined,
    });
    this.rpc = createClient(RouterService, transport);
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.region = opts.region ?? "";
    this.apis = opts.apis ?? [EndpointApi.UNSPECIFIED, EndpointApi.OPENAI];
  }

  /** Who a request is for: a tenant the caller serves, or a client's API key (hashed here, never sent). */
  static identity(id: IdentityInit): Identity {
    const sha = id.apiKey ? createHash("sha256").update(id.apiKey).digest("hex") : id.apiKeySha256 ?? "";
    if (!id.tenantId && !sha) throw new Error("an identity needs tenantId, apiKey or apiKeySha256");
    return create(IdentitySchema, { tenantId: id.tenantId ?? "", apiKeySha256: sha, app: id.app ?? "", environment: id.environment ?? "" });
  }

  private async call1<T>(f: (o: { timeoutMs: number; signal?: AbortSignal }) => Promise<T>, signal?: AbortSignal): Promise<T> {
    try {
      return await f({ timeoutMs: this.timeoutMs, signal });
    } catch (e) {
      throw fromRpcError(e);
    }
  }

  /** Decide for an OpenAI chat completions body; throws RateLimited when the reservation is refused. */
  async decide(body: Record<string, unknown>, identity: Identity, opts: CallOptions = {}, f: PromptFigures = figures(body)): Promise<DecideResponse> {
    const requestId = "req-" + randomUUID();
    const req = create(DecideRequestSchema, {
      requestId, idempotencyKey: requestId, identity, model: String(body.model ?? ""), stream: Boolean(body.stream),
      tokens: {
        inputTokens: BigInt(f.inputTokens), maxOutputTokens: BigInt(f.maxOutputTokens),
        prefixes: f.prefixes.map((p) => ({ hash: p.hash, tokens: BigInt(p.tokens) })),
      },
      provider: opts.provider, region: this.region, reserve: true, sessionId: opts.sessionId ?? "",
    });
    const resp = await this.call1((o) => this.rpc.decide(req, o), opts.signal);
    if (resp.refusal) throw new RateLimited(resp.refusal);
    return resp;
  }

  /** Decide, send, fall back, and report (see the file's comment). */
  async call<T>(body: Record<string, unknown>, send: (a: Attempt) => Promise<T>, identity: Identity, opts: CallOptions = {}): Promise<Result<T>> {
    const created = Date.now();
    const f = figures(body);
    const signals = [opts.signal, opts.timeoutMs !== undefined ? AbortSignal.timeout(opts.timeoutMs) : undefined].filter((s) => s !== undefined);
    const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0];
    const resp = await this.decide(body, identity, { ...opts, signal }, f);
    const tried: Tried[] = [];
    const unused: Reservation[] = [];
    let served: Attempt | undefined;
    let value: T;
    try {
      value = await this.dispatch(body, resp, identity, send, tried, unused, signal, (a) => { served = a; });
    } catch (e) {
      await this.report(body, resp, f, created, tried, unused, served, e);
      if (signal?.aborted && (signal.reason as Error)?.name === "TimeoutError") {
        throw new DeadlineExceeded("the request's deadline passed", Code.DeadlineExceeded, { cause: e });
      }
      throw e;
    }
    const c = await this.report(body, resp, f, created, tried, unused, served);
    return {
      value, requestId: resp.requestId, endpointId: served!.endpoint.id, provider: served!.endpoint.provider,
      attempts: tried.length, usage: served!.usage, costUsd: c, decision: resp.decision,
    };
  }

  private async dispatch<T>(body: Record<string, unknown>, resp: DecideResponse, identity: Identity, send: (a: Attempt) => Promise<T>,
    tried: Tried[], unused: Reservation[], signal: AbortSignal | undefined, done: (a: Attempt) => void): Promise<T> {
    const endpoints = [resp.endpoint!, ...resp.fallbacks];
    const failures: unknown[] = [];
    let previous = RefusalReason.UNSPECIFIED;
    for (let i = 0; i < endpoints.length; i++) {
      const ep = endpoints[i];
      const n = i + 1;
      let reservation = n === 1 ? resp.reservation : undefined;
      if (!this.apis.includes(ep.api)) {
        if (reservation?.reservationId) unused.push(reservation);
        continue;
      }
      if (n > 1) {
        const r = await this.call1((o) => this.rpc.reserve(create(ReserveRequestSchema, {
          requestId: resp.requestId, idempotencyKey: `${resp.requestId}/${n}`, identity, model: resp.model, endpointId: ep.id,
          demand: resp.demand, attempt: n, previousFailure: previous,
        }), o), signal);
        if (!r.admitted) continue;
        reservation = r.reservation;
      }
      const b: Record<string, unknown> = { ...body, model: ep.upstreamModel || resp.model };
      if (b.stream) b.stream_options = { ...(b.stream_options as object ?? {}), include_usage: true };
      const headers: Record<string, string> = { "content-type": "application/json" };
      const key = ep.apiKeyEnv ? process.env[ep.apiKeyEnv] : undefined;
      if (key) headers.authorization = `Bearer ${key}`;
      const a = new Attempt(ep, n, ep.baseUrl.replace(/\/$/, "") + "/chat/completions", headers, b, Boolean(b.stream), signal);
      const base = { attempt: a, reservation, http: 0, code: "", headers: {} as Record<string, string> };
      try {
        const v = await send(a);
        if (a.ttftMs === undefined) a.ttftMs = Date.now() - a.start; // a whole answer: its first token came with its last
        tried.push({ ...base, outcome: Outcome.OK, http: 200, error: "", failure: RefusalReason.UNSPECIFIED });
        done(a);
        return v;
      } catch (e) {
        if (e instanceof ProviderError) {
          const failure = classify(e.status, e.errorCode);
          const outcome = e.status === 429 ? Outcome.RATE_LIMITED
            : failure === RefusalReason.NON_RETRYABLE_REQUEST ? Outcome.CLIENT_ERROR : Outcome.UPSTREAM_ERROR;
          tried.push({ ...base, outcome, http: e.status, error: e.message, code: e.errorCode, failure, headers: e.headers });
          failures.push(e);
          if (a.ttftMs !== undefined || !retryNext.has(e.status)) throw e;
          previous = failure;
          continue;
        }
        if (isConnectFailure(e) && a.ttftMs === undefined && !signal?.aborted) {
          tried.push({ ...base, outcome: Outcome.CONNECT_ERROR, error: String(e), failure: RefusalReason.RETRYABLE_OVERLOAD });
          failures.push(e);
          previous = RefusalReason.RETRYABLE_OVERLOAD;
          continue;
        }
        tried.push({ ...base, outcome: Outcome.CANCELLED, error: `caller: ${(e as Error)?.name ?? "error"}`, failure: RefusalReason.UNSPECIFIED });
        throw e;
      }
    }
    if (failures.length === 0) throw new NoEndpoint("every fallback endpoint's reservation was refused");
    throw new AllEndpointsFailed(failures);
  }

  /**
   * Reconciles every reservation and reports the request; returns its cost.
   * A failure to report is logged, never thrown over the request's outcome:
   * the reservations then expire on their own.
   */
  private async report(body: Record<string, unknown>, resp: DecideResponse, f: PromptFigures, created: number, tried: Tried[],
    unused: Reservation[], served: Attempt | undefined, error?: unknown): Promise<number> {
    const usagePb = (ep: Endpoint, u?: Usage, c?: number) => u ? create(UsageSchema, {
      inputTokens: BigInt(u.inputTokens), cachedInputTokens: BigInt(u.cachedInputTokens), outputTokens: BigInt(u.outputTokens),
      costUsd: c ?? cost(ep, u), reported: true,
    }) : undefined;
    const reconciles = unused.map((r) => create(ReconcileRequestSchema, { reservationId: r.reservationId, usage: {}, outcome: Outcome.CANCELLED }));
    const attempts = [];
    for (const t of tried) {
      const u = t.outcome === Outcome.OK || t.outcome === Outcome.CANCELLED ? t.attempt.usage : undefined;
      if (t.reservation?.reservationId) {
        reconciles.push(create(ReconcileRequestSchema, {
          reservationId: t.reservation.reservationId, usage: usagePb(t.attempt.endpoint, u) ?? {}, outcome: t.outcome, failure: t.failure,
          providerErrorCode: t.code,
          rateLimitHeaders: Object.entries(t.headers).filter(([k]) => /^(x-ratelimit|retry-after)/i.test(k))
            .map(([name, value]) => create(HeaderSchema, { name: name.toLowerCase(), value: String(value) })),
        }));
      }
      attempts.push(create(AttemptSchema, {
        endpointId: t.attempt.endpoint.id, provider: t.attempt.endpoint.provider, outcome: t.outcome, httpStatus: t.http,
        error: t.error.slice(0, 200), startTime: timestampFromMs(t.attempt.start), costUsd: cost(t.attempt.endpoint, u),
        ttft: t.attempt.ttftMs !== undefined ? durationFromMs(t.attempt.ttftMs) : undefined,
      }));
    }
    const last = served ?? tried.at(-1)?.attempt;
    let c = last ? cost(last.endpoint, last.usage) : 0;
    if (resp.caps && resp.caps.maxCostUsd > 0) c = Math.min(c, resp.caps.maxCostUsd);
    let status = CallStatus.FAILED;
    let http = tried.at(-1)?.http ?? 0;
    if (served) {
      status = CallStatus.OK;
      http = 200;
    } else if (error !== undefined && !(error instanceof SwitchboardError)) {
      status = last?.ttftMs !== undefined ? CallStatus.INTERRUPTED : CallStatus.CLIENT_CANCELLED;
      http = 0;
    }
    const record = create(ActivityRecordSchema, {
      id: resp.requestId, createTime: timestampFromMs(created), tenantId: resp.identity?.tenantId ?? "",
      apiKeyId: resp.identity?.apiKeyId ?? "", model: resp.model, requestedModel: String(body.model ?? ""),
      endpointId: last?.endpoint.id ?? "", provider: last?.endpoint.provider ?? "", attempts, costUsd: c, status, httpStatus: http,
      stream: Boolean(body.stream), error: status === CallStatus.OK || error === undefined ? "" : String(error).slice(0, 200),
      duration: durationFromMs(Date.now() - created), grant: resp.grant, caps: resp.caps, clientApi: ClientApi.CHAT_COMPLETIONS,
      usage: last ? usagePb(last.endpoint, last.usage, c) : undefined,
      ttft: last?.ttftMs !== undefined ? durationFromMs(last.ttftMs) : undefined,
    });
    const req = create(ReportCallRequestSchema, {
      record, reconciles, promptTokens: BigInt(f.inputTokens),
      prefixes: f.prefixes.map((p) => create(PromptPrefixSchema, { hash: p.hash, tokens: BigInt(p.tokens) })),
    });
    for (let i = 0; ; i++) {
      try {
        // Not the caller's signal: a request it aborted is still reported.
        await this.call1((o) => this.rpc.reportCall(req, { timeoutMs: o.timeoutMs }));
        return c;
      } catch (e) {
        const retry = e instanceof SwitchboardError && (e.name === "Unavailable" || e instanceof DeadlineExceeded);
        if (i === 2 || !retry) {
          console.warn(`switchboard: request ${resp.requestId} not reported: ${e} (its reservations expire on their own)`);
          return c;
        }
        await new Promise((r) => setTimeout(r, 200 * (i + 1)));
      }
    }
  }
}
