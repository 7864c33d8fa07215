// Package transfer hands a starting replica what a live one learned from the
// edges' reports and the etcd snapshot of the routing statistics does not
// hold: prompt affinity, named conversations, cool-downs and the
// routing-cost outcomes (ReplicaService.TransferState). Serve is the
// answering replica's side, Fetch the starting one's: it asks one live
// peer, bounded in bytes and time, checks every entry as a caller's input,
// and applies the whole only once it has arrived, so a transfer that fails
// leaves the replica as it would have started without one (empty, learning
// from the reports from then on).
package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/affinity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/decider/internal/outcomes"
	"github.com/switchboard-ai/switchboard/services/decider/internal/session"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

// Defaults of [Limits].
const (
	// DefaultMaxBytes bounds a whole transfer. The tables it carries are
	// bounded themselves (200,000 prompts and 200,000 conversations by
	// default, about 100 bytes each on the wire).
	DefaultMaxBytes = 64 << 20
	// DefaultTimeout bounds a whole transfer: a replica starts no later
	// than this for a slow peer. Full tables (400,000 entries, 38 MiB)
	// take about 4 s on a loaded 2-core machine (BenchmarkFetchFullTables).
	DefaultTimeout = 15 * time.Second
	// ChunkEntries is how many entries one message carries at most, so a
	// message stays far below gRPC's 4 MiB default.
	ChunkEntries = 2048
)

// Tables are what a replica hands over and takes. (Required, each)
type Tables struct {
	Affinity  *affinity.Table
	Sessions  *session.Table
	Cooldowns *cooldown.Tracker
	Outcomes  *outcomes.Tracker
	// Now is the clock; (Optional) defaults to time.Now.
	Now func() time.Time
}

func (t Tables) now() time.Time {
	if t.Now == nil {
		return time.Now()
	}
	return t.Now()
}

// Serve sends the tables in messages of at most ChunkEntries entries each,
// through send, until done or ctx ends.
func Serve(ctx context.Context, t Tables, send func(*switchboardv1.TransferStateResponse) error) error {
	now := t.now()
	var msgs []*switchboardv1.TransferStateResponse
	msgs = appendChunks(msgs, t.Affinity.Export(now), func(m *switchboardv1.TransferStateResponse, e affinity.Entry) {
		pe := &switchboardv1.AffinityEntry{Hash: e.Hash, Tokens: e.Tokens}
		for _, s := range e.Served {
			pe.Served = append(pe.Served, &switchboardv1.AffinityServed{EndpointId: s.Endpoint, Time: timestamppb.New(s.At), Whole: s.Whole})
		}
		m.Affinity = append(m.Affinity, pe)
	})
	msgs = appendChunks(msgs, t.Sessions.Export(), func(m *switchboardv1.TransferStateResponse, tu session.Turn) {
		m.Conversations = append(m.Conversations, &switchboardv1.SessionTurn{TenantId: tu.Tenant, Model: tu.Model, SessionId: tu.Session,
			EndpointId: tu.Endpoint, DecideTime: timestamppb.New(tu.At)})
	})
	msgs = appendChunks(msgs, t.Cooldowns.Export(now), func(m *switchboardv1.TransferStateResponse, b cooldown.Bench) {
		pe := &switchboardv1.CooldownEntry{EndpointId: b.Endpoint, Until: optTime(b.Until)}
		for _, r := range b.Refusals {
			pe.Refusals = append(pe.Refusals, timestamppb.New(r))
		}
		m.Cooldowns = append(m.Cooldowns, pe)
	})
	msgs = appendChunks(msgs, t.Outcomes.Export(), func(m *switchboardv1.TransferStateResponse, s outcomes.Saved) {
		m.Outcomes = append(m.Outcomes, &switchboardv1.OutcomeEntry{EndpointId: s.Endpoint, Time: timestamppb.New(s.At),
			Calls: s.Calls, RateLimited: s.RateLimited, Failed: s.Failed, Poor: s.Poor, RecentCalls: s.RecentCalls, RecentFailed: s.RecentFailed,
			Priced: s.Priced, InputTokens: s.InputTokens, CachedTokens: s.CachedTokens, OutputTokens: s.OutputTokens, ChargedUsd: s.Charged,
			OutputTokensTimed: s.OutputTokensTimed, CallSeconds: s.CallSeconds, Checks: s.Checks, Cap: s.Cap,
			CapTime: optTime(s.CapAt), PausedUntil: optTime(s.PausedUntil)})
	})
	for _, m := range msgs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := send(m); err != nil {
			return err
		}
	}
	return nil
}

// appendChunks appends to msgs the messages that carry items, ChunkEntries
// a message, each item put by put.
func appendChunks[T any](msgs []*switchboardv1.TransferStateResponse, items []T, put func(*switchboardv1.TransferStateResponse, T)) []*switchboardv1.TransferStateResponse {
	for len(items) > 0 {
		n := min(len(items), ChunkEntries)
		m := &switchboardv1.TransferStateResponse{}
		for _, it := range items[:n] {
			put(m, it)
		}
		msgs = append(msgs, m)
		items = items[n:]
	}
	return msgs
}

func optTime(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func optAsTime(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

// Limits bound a Fetch.
type Limits struct {
	// MaxBytes bounds the whole transfer. (Optional) Defaults to DefaultMaxBytes.
	MaxBytes int
	// Timeout bounds the whole transfer. (Optional) Defaults to DefaultTimeout.
	Timeout time.Duration
}

// Result is what a Fetch took.
type Result struct {
	// Affinity, Conversations, Cooldowns and Outcomes count the entries
	// applied; Refused those dropped by their checks.
	Affinity, Conversations, Cooldowns, Outcomes, Refused int
	// Bytes is the size of the messages received.
	Bytes int
}

// ErrTooLarge is a transfer past Limits.MaxBytes.
var ErrTooLarge = errors.New("the state transfer exceeds its size bound")

// Fetch asks the replica on conn for its state as replica self, and applies
// it to t once all of it arrived within lim; on any error nothing is
// applied.
func Fetch(ctx context.Context, conn grpc.ClientConnInterface, self string, t Tables, lim Limits) (Result, error) {
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = DefaultMaxBytes
	}
	if lim.Timeout <= 0 {
		lim.Timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	stream, err := switchboardv1.NewReplicaServiceClient(conn).TransferState(ctx, &switchboardv1.TransferStateRequest{ReplicaId: self},
		grpc.MaxCallRecvMsgSize(lim.MaxBytes))
	if err != nil {
		return Result{}, fmt.Errorf("ask for the state: %w", err)
	}
	var (
		res   Result
		aff   []affinity.Entry
		turns []session.Turn
		cools []cooldown.Bench
		outs  []outcomes.Saved
	)
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Result{}, fmt.Errorf("receive the state: %w", err)
		}
		if res.Bytes += proto.Size(m); res.Bytes > lim.MaxBytes {
			return Result{}, fmt.Errorf("%w (%d bytes)", ErrTooLarge, lim.MaxBytes)
		}
		for _, e := range m.GetAffinity() {
			if validate.AffinityEntry(e) != nil {
				res.Refused++
				continue
			}
			ae := affinity.Entry{Hash: e.GetHash(), Tokens: e.GetTokens()}
			for _, s := range e.GetServed() {
				ae.Served = append(ae.Served, affinity.Served{Endpoint: s.GetEndpointId(), At: s.GetTime().AsTime(), Whole: s.GetWhole()})
			}
			aff = append(aff, ae)
		}
		for _, c := range m.GetConversations() {
			if validate.Conversation(c) != nil {
				res.Refused++
				continue
			}
			turns = append(turns, session.Turn{Tenant: c.GetTenantId(), Model: c.GetModel(), Session: c.GetSessionId(),
				Endpoint: c.GetEndpointId(), At: c.GetDecideTime().AsTime()})
		}
		for _, c := range m.GetCooldowns() {
			if validate.CooldownEntry(c) != nil {
				res.Refused++
				continue
			}
			b := cooldown.Bench{Endpoint: c.GetEndpointId(), Until: optAsTime(c.GetUntil())}
			for _, r := range c.GetRefusals() {
				b.Refusals = append(b.Refusals, r.AsTime())
			}
			cools = append(cools, b)
		}
		for _, o := range m.GetOutcomes() {
			if validate.OutcomeEntry(o) != nil {
				res.Refused++
				continue
			}
			outs = append(outs, outcomes.Saved{Endpoint: o.GetEndpointId(), At: o.GetTime().AsTime(),
				Calls: o.GetCalls(), RateLimited: o.GetRateLimited(), Failed: o.GetFailed(), Poor: o.GetPoor(),
				RecentCalls: o.GetRecentCalls(), RecentFailed: o.GetRecentFailed(), Priced: o.GetPriced(),
				InputTokens: o.GetInputTokens(), CachedTokens: o.GetCachedTokens(), OutputTokens: o.GetOutputTokens(), Charged: o.GetChargedUsd(),
				OutputTokensTimed: o.GetOutputTokensTimed(), CallSeconds: o.GetCallSeconds(), Checks: o.GetChecks(), Cap: o.GetCap(),
				CapAt: optAsTime(o.GetCapTime()), PausedUntil: optAsTime(o.GetPausedUntil())})
		}
	}
	t.Affinity.Import(aff)
	t.Sessions.Import(turns)
	t.Cooldowns.Import(cools)
	t.Outcomes.Import(outs)
	res.Affinity, res.Conversations, res.Cooldowns, res.Outcomes = len(aff), len(turns), len(cools), len(outs)
	return res, nil
}
