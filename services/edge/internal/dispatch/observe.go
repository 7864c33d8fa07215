package dispatch

import (
	"context"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Finished is what [Dispatcher.Serve] tells a request's observer once the
// request has ended: its activity record (every attempt, the hedge, usage,
// cost and first-token time) and why the decider chose its endpoint.
type Finished struct {
	Record      *switchboardv1.ActivityRecord
	RouteReason switchboardv1.RouteReason
	// PromptTokens is the request's prompt estimate, whose size bucket
	// the decider keeps each endpoint's speed by.
	PromptTokens int64
}

type observerKey struct{}

// WithObserver returns ctx carrying fn, which Serve calls with the
// request's [Finished] when it is served with a context derived from the
// one returned — as net/http/httptrace carries a trace, so that whoever
// wraps the HTTP handler learns how each request ended without the
// dispatcher knowing about it. fn runs on the request's goroutine and must
// not keep the record.
func WithObserver(ctx context.Context, fn func(Finished)) context.Context {
	return context.WithValue(ctx, observerKey{}, fn)
}

// observe tells ctx's observer, if any, how the request ended.
func observe(ctx context.Context, f Finished) {
	if fn, ok := ctx.Value(observerKey{}).(func(Finished)); ok && fn != nil {
		fn(f)
	}
}
