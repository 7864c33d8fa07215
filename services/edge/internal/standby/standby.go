// Package standby is what the edge serves with when no decider can be
// reached: the last routing answer a decider gave it for the same kind of
// request, for at most a grace period, admitted within a local share of
// the fleet's limits instead of by the rate-limit broker.
//
// A remembered answer is keyed by everything of a request its routing
// depends on that the edge knows (the caller's key, the identity it asks
// for, the model, the prompt's size bucket, its output bound and the
// request's routing options; the key is built by the caller). It is served
// as it was given: its endpoint, fallbacks and hedge plan, with its grant
// and caps, under which the decider stores the call's activity record
// once it is back (pkg/offline). Nothing is reserved: the broker cannot be
// asked. Instead a token bucket per tenant and workload class, and one per
// endpoint, each holding one minute of the edge's share and refilled at
// that share per minute, admit or refuse the call.
//
// The bound: an edge admits at most S·(1 + G/1m) calls of one tenant and
// class (and to one endpoint) in an outage of grace G, where S is the
// fleet-wide requests per minute configured for it divided by the edges
// sharing it. With E edges actually serving, the fleet admits at most E/N
// times the configured rate (N being the share), plus one minute of it per
// edge as burst. No other limit (tokens, spend, concurrency, provider
// limits the broker learned) is enforced while offline.
package standby

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-ai/switchboard/pkg/offline"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// DefaultGrace is how long a remembered answer may be served from.
const DefaultGrace = time.Minute

// DefaultMaxAnswers bounds the answers remembered.
const DefaultMaxAnswers = 10000

// ErrNoAnswer is Serve's error when nothing young enough is remembered
// for the request, or serving offline is off.
var ErrNoAnswer = errors.New("no routing answer remembered for this request within the offline grace")

// ErrClassClosed is Serve's error when the request's workload class is not
// served offline: it fails closed.
var ErrClassClosed = errors.New("the workload class is not served without a decider")

// LimitError is Serve's error when the local share of a limit is spent.
type LimitError struct {
	// Scope says which: "tenant" or "endpoint".
	Scope string
	// RetryAfter is when the bucket holds a call again.
	RetryAfter time.Duration
}

// Error implements [error].
func (e *LimitError) Error() string {
	return fmt.Sprintf("the routing service is unavailable and this edge's offline share of the %s's requests per minute is spent; retry shortly", e.Scope)
}

// Options configure a Standby.
type Options struct {
	// Grace is the longest a remembered answer is served from (Optional).
	// Zero turns serving offline off: every request fails closed. At most
	// offline.MaxGrace.
	Grace time.Duration
	// Share is how many edges share each limit (Optional). Defaults to 1.
	Share int
	// Classes are the workload classes served offline, each with the
	// fleet-wide requests per minute one tenant of it may make then
	// (Optional). A class not listed fails closed.
	Classes map[switchboardv1.WorkloadClass]float64
	// EndpointRPM is the fleet-wide requests per minute one endpoint is sent
	// offline (Optional). Zero sets no endpoint limit.
	EndpointRPM float64
	// MaxAnswers bounds the answers remembered (Optional). Defaults to
	// DefaultMaxAnswers.
	MaxAnswers int
	// Now is the clock (Optional). Defaults to time.Now.
	Now func() time.Time
}

// Standby remembers answers and serves from them. It is safe for
// concurrent use.
type Standby struct {
	opts    Options
	mu      sync.Mutex
	answers map[string]answer
	buckets map[string]*bucket
}

type answer struct {
	resp *switchboardv1.DecideResponse
	at   time.Time
}

// New returns a Standby.
func New(o Options) *Standby {
	if o.Share <= 0 {
		o.Share = 1
	}
	if o.MaxAnswers <= 0 {
		o.MaxAnswers = DefaultMaxAnswers
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Grace = min(o.Grace, offline.MaxGrace)
	return &Standby{opts: o, answers: map[string]answer{}, buckets: map[string]*bucket{}}
}

// On reports whether the standby serves at all (a grace above 0): callers
// skip building its keys when it does not.
func (s *Standby) On() bool { return s != nil && s.opts.Grace > 0 }

// Remember keeps resp, a decider's answer, as the one for key. Only an
// answer that routes (an endpoint, no refusal) and carries a grant is
// kept. resp must not change afterwards.
func (s *Standby) Remember(key string, resp *switchboardv1.DecideResponse) {
	if !s.On() || resp.GetEndpoint() == nil || resp.GetRefusal() != nil || len(resp.GetGrant()) == 0 {
		return
	}
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.answers[key]; !ok && len(s.answers) >= s.opts.MaxAnswers {
		s.evict(now)
	}
	s.answers[key] = answer{resp: resp, at: now}
}

// evict makes room for one answer: every expired one goes, or else one
// chosen by the map's order.
func (s *Standby) evict(now time.Time) {
	for k, a := range s.answers {
		if now.Sub(a.at) > s.opts.Grace {
			delete(s.answers, k)
		}
	}
	for k := range s.answers {
		if len(s.answers) < s.opts.MaxAnswers {
			return
		}
		delete(s.answers, k)
	}
}

// Served is a request served from a remembered answer.
type Served struct {
	// Resp is the answer as the request is served by: the remembered one
	// for requestID, its reason ROUTE_REASON_OFFLINE, with no reservation.
	Resp *switchboardv1.DecideResponse
	// GrantRequestID is the request the answer was given for, whose grant
	// and caps the call's activity record carries.
	GrantRequestID string
	// Age is how old the answer is.
	Age time.Duration
}

// Serve returns the answer for key to serve requestID by, admitted within
// the local share; ErrNoAnswer, ErrClassClosed or a *LimitError when it
// cannot.
func (s *Standby) Serve(key, requestID string) (Served, error) {
	if !s.On() {
		return Served{}, ErrNoAnswer
	}
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.answers[key]
	if !ok || now.Sub(a.at) > s.opts.Grace {
		return Served{}, ErrNoAnswer
	}
	id := a.resp.GetIdentity()
	rpm, ok := s.opts.Classes[id.GetWorkloadClass()]
	if !ok {
		return Served{}, ErrClassClosed
	}
	tenant := s.bucket("tenant\x00"+id.GetTenantId()+"\x00"+id.GetWorkloadClass().String(), rpm, now)
	if !tenant.has() {
		return Served{}, &LimitError{Scope: "tenant", RetryAfter: tenant.wait()}
	}
	if s.opts.EndpointRPM > 0 {
		endpoint := s.bucket("endpoint\x00"+a.resp.GetEndpoint().GetId(), s.opts.EndpointRPM, now)
		if !endpoint.has() {
			return Served{}, &LimitError{Scope: "endpoint", RetryAfter: endpoint.wait()}
		}
		endpoint.take()
	}
	tenant.take()
	return Served{Resp: offlineAnswer(a.resp, requestID), GrantRequestID: a.resp.GetRequestId(), Age: now.Sub(a.at)}, nil
}

// offlineAnswer is resp as requestID is served by it offline.
func offlineAnswer(resp *switchboardv1.DecideResponse, requestID string) *switchboardv1.DecideResponse {
	out := proto.Clone(resp).(*switchboardv1.DecideResponse)
	out.RequestId = requestID
	out.Reservation, out.Queue, out.Demand = nil, nil, nil
	d := out.GetDecision()
	if d == nil {
		d = &switchboardv1.Decision{}
		out.Decision = d
	}
	d.Reason = switchboardv1.RouteReason_ROUTE_REASON_OFFLINE
	d.Summary = "offline: " + d.GetSummary()
	return out
}

// bucket returns the bucket named key, refilling at rpm/Share per minute
// and holding as much (full when new), refilled up to now.
func (s *Standby) bucket(key string, rpm float64, now time.Time) *bucket {
	b, ok := s.buckets[key]
	if !ok {
		size := rpm / float64(s.opts.Share)
		b = &bucket{size: size, tokens: size, at: now}
		s.buckets[key] = b
	}
	b.refill(now)
	return b
}

// bucket is a token bucket of calls holding at most size, refilled at
// size per minute.
type bucket struct {
	size, tokens float64
	at           time.Time
}

func (b *bucket) refill(now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(b.size, b.tokens+b.size*d.Minutes())
		b.at = now
	}
}

func (b *bucket) has() bool { return b.tokens >= 1 }

func (b *bucket) take() { b.tokens-- }

// wait is how long until the bucket holds a call.
func (b *bucket) wait() time.Duration {
	if b.size <= 0 {
		return time.Minute
	}
	return time.Duration((1 - b.tokens) / b.size * float64(time.Minute))
}
