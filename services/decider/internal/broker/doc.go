// Package broker is the in-memory core of the central rate-limit broker:
// canonical quota buckets, atomic hierarchical
// reservations, expiry, reconciliation with actual usage and provider
// headers, bounded estimate correction, and snapshots for failover. It does
// no I/O; the decider's Reserve and Reconcile RPCs call it, and the decider
// persists its snapshots and runs the expiry ticker. Time comes from an
// injectable clock ([Options].Now).
//
// # Buckets
//
// Every limit is a bucket with a scope, a key naming the scope instance, a
// unit, a rule, a limit and a source (configured, or learned from provider
// headers). Scopes, narrowest first: api_key, app, tenant, partner,
// provider_workspace, provider_project, model_route. Units: requests,
// input_tokens, output_tokens, total_tokens (input + output), usd,
// concurrent_requests. A bucket's level is what it can still admit; it starts
// full. Rules, with L = capacity + burst:
//
//   - Token bucket (per second, minute or hour; also a spend window in USD):
//     the level refills continuously, level = min(L, level + capacity ×
//     elapsed / window), so a window admits capacity at the steady rate and
//     up to L at once after an idle spell (burst).
//   - Daily reset (per day, any unit, so also a daily spend limit): the level
//     returns to L at every reset time, by default 00:00 UTC, or a configured
//     time of day (a provider's reset time). Day k (Unix days, no leap
//     seconds) starts at k×86400 s + reset offset. No refill in between.
//   - Concurrency (concurrent_requests): each open reservation holds one
//     unit until it is reconciled or expires; nothing refills it.
//   - Ramp: periods are aligned on the Unix epoch (default one minute). The
//     current period may admit limit = max(floor, (1 + max_increase) × A),
//     where A is what the previous period admitted (net of refunds and
//     overruns settled within it), and 0 if the previous period saw no
//     traffic or was longer ago: so after idle time traffic starts again from
//     the floor. A spec with both a window and a ramp gives two buckets.
//
// # Reserve
//
// Reserve resolves the buckets that apply to a request: those keyed by its
// API key id; its app ("tenant/app", and "tenant/app/env" when an
// environment is given); its tenant; its partner; and its endpoint's route:
// the model_route buckets keyed by the endpoint id and the provider_workspace
// and provider_project buckets keyed by the route's Workspace and Project
// (by default the provider's name, so a provider_project limit is shared by
// every endpoint of that provider). It then locks them all in the canonical
// order, checks them narrowest scope first (then a route's Retry-After pause,
// just before its model_route buckets), and charges all of them or none.
// Every unit of the demand goes to the buckets of that unit: requests
// (default 1), input tokens, output tokens, their sum, USD, and one
// concurrency slot.
//
// A bucket admits an amount a when level − a ≥ hold × L − ε, with hold = 0
// outside learning mode and ε = 1e-9 × max(1, L) to absorb float rounding of
// fractional USD. A zero amount is admitted only when level > hold × L, so a
// used-up spend limit cannot be passed by estimating no spend. A ramp
// bucket admits when A_current + a ≤ limit (same tolerance and hold).
//
// On the first bucket that does not admit, nothing is charged and the
// Refusal names it: scope, unit, limit, remaining, reset time, retry-after
// and a reason:
//
//   - NON_RETRYABLE_REQUEST when a > L: the demand can never fit (a ramp,
//     whose limit grows with traffic, never says this);
//   - NON_RETRYABLE_POLICY when a daily-reset bucket (a daily quota or daily
//     spend limit) is used up: a policy error, since retrying before the
//     reset cannot succeed; retry_after still says when the reset comes;
//   - RETRYABLE_CAPACITY otherwise, with retry_after = (a + hold×L − level) /
//     rate for a token bucket, the next period start for a ramp, and
//     Options.ConcurrencyRetry (default 1s, reset time unknown) for a
//     concurrency bucket; a route paused by Retry-After answers
//     RETRYABLE_CAPACITY (after a 429) or RETRYABLE_OVERLOAD (after a 503)
//     until the pause ends.
//
// Before giving up, Reserve sweeps expired reservations once if any is due
// (lazy expiry) and tries again.
//
// # Atomicity and scale
//
// No global lock is on the hot path. Each bucket has its own mutex;
// Reserve takes the mutexes of its buckets in one global order (scope, then
// creation index: both fixed for a bucket's life), so two reservations that
// share buckets cannot deadlock, and it decides and charges while holding all
// of them, so the decision is made on a consistent view of every bucket
// involved (no bucket is ever charged past its limit, and no reservation is
// refused because another one's doomed partial charge was briefly visible,
// as happens with charge-then-roll-back). Unrelated tenants touch disjoint
// mutexes; a hot shared bucket (a provider project) serialises only the few
// hundred nanoseconds of arithmetic under its lock. Open reservations live in
// 64 shards, each with its own mutex, id and idempotency maps and expiry
// heap; a reservation id carries its shard. The bucket set itself is an
// immutable table behind an atomic pointer, replaced whole (copy on write)
// on reconfiguration and on the rare learned bucket, so lookups take no lock.
// Lock order, always: table mutex (configuration, snapshot) → one shard (or
// all, ascending, in Snapshot and Restore) → buckets in canonical order.
// The admission queues add two locks before the shard: the dispatch lock
// (one pass at a time) → the queue mutex → shard → buckets. A pass holds
// the queue mutex while it tries reservations, so it takes shard and
// bucket locks in the order Reserve does; nothing that holds a shard, a
// bucket or the table mutex ever takes a queue lock (Reconcile, Expire and
// Reconfigure wake the queue after releasing theirs), so the orders cannot
// cross.
//
// # Layout
//
// Every piece below takes some of those three locks, and the order is only
// safe if all of them keep it, so the broker stays one package with one file
// per purpose:
//
//   - broker.go: the Broker, its locks and learning mode;
//   - options.go: Options and their defaults;
//   - table.go: the immutable bucket table and routes, and how a request
//     resolves its buckets; the canonical bucket order is sortBuckets in
//     bucket.go;
//   - reserve.go: Reserve, the one place the whole lock order is taken
//     for an admission (shard, then buckets ascending);
//   - refusal.go: what a refusal says, and its safe figures;
//   - reconcile.go, lifecycle.go: Reconcile, late and repeated
//     reconciliations, Extend (shard, then one bucket at a time);
//   - expiry.go: Expire and lazy expiry (each shard, then its buckets);
//   - reconfigure.go: Reconfigure and new routes (table mutex only);
//   - queue.go: ReserveWait, class contracts, Pump and the queue views;
//     fairq.go: the fair queue, its dispatch passes and timer (dispatch
//     lock, queue mutex, then reserve's order);
//   - headers.go: provider headers and classified failures folded into
//     learned buckets and route pauses; parsing them shares no state and is
//     the provheaders subpackage;
//   - retry.go: the retry budget of logical requests and the deadline of a
//     retry (its own small sharded map; a leaf lock);
//   - snapshot.go, restore.go: Snapshot and Restore (table mutex, every
//     shard ascending, then buckets); snapshot_decode.go: the snapshot
//     read back and validated, with no lock; state.go: what a snapshot
//     may hold and what each part takes of it;
//   - limits.go: the Limits view; correct.go: estimate correction;
//     spec.go: bucket specs from the catalog; ids.go: reservation ids.
//
// # Queues and fair sharing
//
// Reserve answers at once. [Broker.ReserveWait] applies the request's
// workload class contract ([ClassContract]: deadline MaxWait, MaxDepth,
// overload action, weight; the unspecified class is interactive, and a
// class the configuration does not name gets [DefaultContract], which
// never queues). A refusal that waiting may fix — RETRYABLE_CAPACITY or
// RETRYABLE_OVERLOAD whose retry_after is within the wait, or any
// concurrency refusal, whose slot frees when some call ends — puts the
// request in its class's queue; the wait is the class's MaxWait, shortened
// by the request's MaxWait and by its context's deadline (less a tenth of
// what is left, at most 100 ms, so the answer reaches the caller). Any
// other refusal is returned at once. A request that would make the queue
// deeper than MaxDepth is refused with code queue_full (reason
// RETRYABLE_OVERLOAD), retry after the later of its bucket's retry_after
// and the class's MaxWait (by then every request waiting now has left;
// nothing of other tenants' requests is told); one still waiting at its
// deadline with code queue_deadline (reason DEADLINE), naming the bucket
// of its last try. A class whose overload action is OverloadFallback names
// its fallback model on those refusals, and on a retryable refusal it could
// not wait out, when the bucket in the way is a provider's (another model
// counts against the caller's own limits the same). A caller whose context ends leaves the queue (counted as
// cancelled) unless another caller joined the request: a ReserveWait with
// the idempotency key (scoped by tenant) of a waiting request waits on it,
// with its id and place; with Options.QueueReattach a request with a key
// whose last caller left keeps its place that long — not admitted, but its
// tenant's later requests that need one of its buckets stay behind it — so
// a caller whose call broke can re-attach.
//
// Freed capacity is offered in dispatch passes: Reconcile, Expire and
// Reconfigure run one after releasing their locks, [Broker.Pump] runs one
// at a given time (a fake clock's, in tests), and while requests wait a
// timer goroutine runs one at the earliest time one of them may fit by the
// clock alone — a refill, a period, a pause ending — or reaches its
// deadline, at least once a second ([Options].ManualPump leaves it to the
// caller). A pass first refuses requests past their deadline, gives those
// at it one last try, and then serves flows — a tenant's requests of one
// class, in arrival order — by weighted fair queueing on virtual time:
// with w = the tenant's weight × its class's weight and cost 1 per request
// (Demand.Requests), a flow's head starts at S = max(F_last, V − burst/w)
// and finishes at F = S + cost/w, where F_last is the finish of the flow's
// last admission and V the start of the latest admission overall. The
// flow with the smallest F is offered first; if its head fits, it is
// admitted and the flow's next head tagged; if not, the flow's later
// requests (up to 16) that need none of the buckets that refused are
// tried, then the next flow. So busy flows share contended capacity in
// proportion to their weights; a tenant that comes back from idle, or
// that was held back by its own limits, runs ahead of the others by at
// most its burst (TenantShare.Burst, else Options.FairBurst, 1 request),
// whatever it did not use before; a request that does not fit blocks
// neither other tenants nor its own tenant's requests for other buckets,
// while a later request of the same tenant never takes a bucket an earlier
// one waits for; and capacity nobody else waits for goes to whoever fits,
// however far over its share (work-conserving). While requests wait, an
// arrival that needs a bucket one of them was refused by joins the queue
// and is offered in fair order rather than taking what they wait for; one
// that needs none of those buckets is reserved at once. Across tenants a
// large request may still be passed by smaller ones that fit the same
// shared bucket until its deadline: the queue does not hold capacity back
// for it.
//
// The answer of a request that was queued carries a [QueueDecision]: its
// id, class, position (its own tenant's requests ahead of it in the
// class's queue, never others' counts), how long it waited, and an
// estimated wait only when the clock alone frees the bucket in the way (a
// refill, a period, a pause of known end) and no request, its own tenant's
// or another's, waits for that bucket ahead of it. [Broker.QueueDepths]
// and [Broker.QueueStats] are for metrics. A snapshot carries the waiting
// requests that have an idempotency key (the earliest 4096): a new owner
// restores them orphaned, in their order and with their ids, for
// Options.QueueReattach, so the callers of the old owner, whose calls
// failed, re-attach with their retries and keep their places.
//
// # Idempotency and expiry
//
// A Reserve whose idempotency key (scoped by tenant) matches a live
// reservation returns that reservation and charges nothing. Reservations
// live for the request's TTL (default 2 min, at most Options.MaxTTL, 15 min
// by default). Expire(now), called by a ticker, releases those past their
// TTL in O(shards + expired). An expired reservation releases its
// concurrency slot; its tokens, requests and spend stay consumed unless its
// limit says refund_on_expiry (Spec.RefundOnExpiry; the default for limits
// that say nothing is Options.RefundOnExpiry, false), because an abandoned
// reservation may well have been dispatched (the edge died after sending)
// and keeping the charge can only under-admit.
//
// # Reconcile
//
// Reconcile replaces the estimate with the actual usage. Per bucket charged
// amount r, with actual u for its unit (requests: r, never refunded, the
// provider counted the call; tokens and USD: the usage; concurrency: 0), it
// settles Δ = r − u: Δ > 0 gives back, capped so the level never exceeds L;
// Δ < 0 charges the overrun, which may leave the level negative (a token
// bucket then refuses until it has refilled past zero, a daily bucket until
// its reset, a ramp counts it as admitted). For a daily or ramp bucket whose
// period has rolled over since the charge, the reset already dropped the
// charge, so nothing is settled. The reservation is then closed: a second
// Reconcile gets an error matching ErrAlreadyReconciled and ErrNotFound and
// changes no bucket, so a reconciliation delivered twice is applied once.
//
// An expired reservation is remembered (a tombstone) for Options.Tombstone:
// its late Reconcile — a stream that outlived its TTL — settles every bucket
// but concurrency (released by expiry) to the actual usage, once. An edge
// keeps the reservations of its calls in flight open with [Broker.Extend].
//
// # Provider headers
//
// Reconcile parses the provider's headers ([ParseHeaders]:
// x-ratelimit-{limit,remaining,reset}-{requests,tokens,input-tokens,output-tokens},
// anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset},
// retry-after, retry-after-ms) and folds them in as corrections, never as the
// model. Families map to units requests, total_tokens, input_tokens and
// output_tokens. For each family, each per-minute token bucket of that unit
// on the route (model_route, provider_workspace, provider_project) is lowered
// to the provider's remaining when that is below our level, never raised (our
// level also counts reservations the provider has not seen yet, and the
// configured limit stays the model). A limit that no such bucket covers
// becomes a learned per-minute model_route bucket with the provider's limit
// and remaining (OpenAI and Anthropic report per-minute limits); a learned
// bucket follows later reported limits.
//
// The route is paused (Reserve refuses it, code provider_paused) until:
// Retry-After; else, when a family reports remaining < 1 with a reset time,
// the latest such reset; else, on a 429 or a failure the caller classified
// RETRYABLE_CAPACITY or RETRYABLE_OVERLOAD (a 503, a 529, a connection
// error: [ReconcileRequest].Failure, pkg/failclass) without either, a
// capped exponential back-off BackoffBase × 2^(n−1) ≤ BackoffMax for the
// n-th such failure in a row (reset by a success); else, on a
// NON_RETRYABLE_POLICY failure (the provider's spend limit, billing or a
// disabled key), MaxPause. The pause is capped at MaxPause (10 min), and
// never beyond provheaders.MaxRetryAfter (15 min) whatever MaxPause says, so a
// bogus header cannot bench an endpoint for days, and a policy refusal is
// tried again that often rather than never, plus a jitter uniform in [0,
// min(MaxJitter, JitterFraction × pause)] (1 s, 10%) so edges do not all
// wake at once: Retry-After is a lower bound. A pause only ever extends;
// its refusal's reason is the failure's class (RETRYABLE_CAPACITY after a
// 429, RETRYABLE_OVERLOAD after an overload, NON_RETRYABLE_POLICY after a
// policy refusal). A failure of the request itself (NON_RETRYABLE_REQUEST)
// says nothing of the route and pauses nothing. The pause is per route,
// but a NON_RETRYABLE_POLICY failure whose provider error code names the
// account (pkg/failclass.IsAccount: a spend limit, billing, a disabled key)
// pauses every route of the same provider account (Route.Account, from the
// catalog's provider, provider_project and api_key_env), whatever the
// model. A reconcile with FailureDeferred pauses nothing: the edge does not
// know yet whether the failure was the endpoint's or the request's, and a
// second reconcile of the same reservation applies the pause, once, when
// it was the endpoint's. A Scoped reconcile (a service the catalog does not
// trust for shared provider state) pauses the route, or the account's
// routes, for its reservation's tenant only and corrects no bucket
// (scope.go).
//
// # Retries
//
// A Reserve names its attempt within the logical request RequestID
// (Attempt: 1 for the first, 2 for the first retry) and how the previous
// attempt failed (PreviousFailure). A first attempt leaves no state. A
// retry is refused with reason NON_RETRYABLE_REQUEST and code
// non_retryable after a failure of the request itself, which every
// endpoint would refuse; it is checked against the request's retry budget
// — its class's ClassContract.RetryBudget, DefaultRetryBudget (2) when the
// class has no contract or a budget of 0, none when negative — and past it
// refused with reason NON_RETRYABLE_REQUEST and code retry_budget. Each
// attempt number spends one retry once, and only when its reservation is
// granted: an idempotent replay, or the same attempt moving on to another
// endpoint after a refusal, spends nothing more. The budget is kept per
// (tenant, request id) for MaxTTL after the first retry, in 16 shards of
// their own, pruned in creation order (which is expiry order) by Reserve
// and Expire, so memory is bounded by the retry rate × MaxTTL. It is not
// in snapshots: after a failover a request's retries start again from the
// budget, which can at most double them once. A retry whose context
// deadline comes before the end of its route's pause is refused at once
// with reason DEADLINE and code deadline (RetryAfter still says when the
// route is back); a first attempt is not, since its call's deadline is the
// decision's, not the request's.
//
// # Estimate correction
//
// Per (model, endpoint) the broker keeps factors for input tokens, output
// tokens and USD, 1 until trained. Each reconcile with outcome OK and usage
// reported by the provider trains them with r = actual / estimate (the
// caller's raw estimate, not the corrected one, so the factor converges to
// the mean ratio):
//
//	f' = clamp(clamp(f + α(clamp(r, 0.5, 2) − f), f(1−s), f(1+s)), 0.5, 2)
//
// with α = 0.1 and s = 0.05: one odd request moves a factor by at most 5%,
// and no history can push it outside [0.5, 2]. Reserve reserves
// Correct(model, endpoint, estimate) (tokens rounded up) and records both.
//
// # Snapshots and learning mode
//
// Snapshot encodes bucket levels, learned limits, route pauses, open
// reservations, correction factors and queued requests as a protobuf
// switchboard.state.v1.BrokerSnapshot, consistent between reservations and
// levels; a snapshot holding one impossible value is refused whole. Restore
// loads one into a broker built from today's configuration. A new owner
// does not know what the old owner granted after its last snapshot, so
// after an unclean stop it calls SetConservative(LearningUntil(now)):
// until the longest TTL the old
// owner granted (recorded in its snapshot, at least DefaultTTL) has passed,
// and not before the old owner's own learning mode ended (after a clean
// stop of an owner still in learning mode, the new owner keeps it until
// the same time: OldLearning). Until then every
// bucket admits only while, after the charge, at least
// (1 − ConservativeFraction) × L (half, by default) stays free — but a bucket
// counted in units always lets at least one unit through (a concurrency of 1
// still admits one request), trading a little possible over-admission for
// not refusing everything.
//
// # Quota leases
//
// The owner lends other replicas shares of its large buckets (lease.go):
// [Broker.RenewLeases] gives back what a replica's live lease of each
// bucket had left (never more than it holds; an overrun is charged
// whatever the lease), then takes the replica's new share from the
// bucket's level as a charge — twice its demand since its last renewal,
// or its demand's part of LeaseFraction × the bucket's limit when the
// replicas want more, less what the others hold, never below what
// learning mode keeps nor while the state is not durable — for LeaseTerm.
// A lease not renewed within its term is forgotten and stays consumed.
// Only rolling token buckets of the catalog whose capacity is at least
// LeaseMinCapacity are leased. The lease records are in memory only
// (leases.mu, then one bucket's mutex at a time); what they took is in the
// levels, so in the snapshot, and LearningUntil lasts at least
// MaxLeaseTerm. A replica's side is [Holder]: it admits a request whose
// every bucket is leased to it with enough left ([Broker.LeasePlan]
// computes the charges Reserve would make), settles its reconciliation
// against the lease, and hands failures the owner must hear to
// [Broker.Observe], through the next renewal.
//
// # Safe metadata
//
// A Refusal and the Limits view carry figures only for the caller's own
// buckets (API key, app, tenant). Partner and provider buckets are shared, so
// their levels are other tenants' consumption: a refusal by one says
// "provider capacity" (or "partner capacity") with limit and remaining 0.
// Bucket ids (in charges, for the decider's logs) are built from catalog
// names, never from credentials.
package broker
