package dispatch

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/invoice"
	"github.com/switchboard-ai/switchboard/services/edge/internal/rewrite"
	"github.com/switchboard-ai/switchboard/services/edge/internal/upstream"
)

// leg is one call to one endpoint as the request sees it: the upstream
// call, and what dispatch tracks about it.
type leg struct {
	*upstream.Leg
	hedge bool
	// reservation is the broker reservation the call is sent under, named
	// in its CallReport so the decider reconciles it; empty for probes and
	// calls the broker is not in play for.
	reservation string
	// opened is closed when Open, run on its own goroutine, returned.
	opened chan struct{}
	// reported is set once the leg's CallReport was sent: exactly once.
	reported bool
	// held is set for a failure that may be the request's, whose report
	// waits for the request's outcome (see charge.go); requestFailure once
	// it is known to be the request's.
	held, requestFailure bool
	// deferred is set when the leg's reservation, deferredID, was
	// reconciled with its failure deferred: charging the failure to the
	// endpoint takes a second reconcile.
	deferred   bool
	deferredID string
	// span is the call's span, nil when the edge makes none; ended when
	// the leg is reported.
	span trace.Span
}

// newLeg prepares a call to ep for this request (see upstream.NewLeg).
func (d *Dispatcher) newLeg(ctx context.Context, call Call, ep *switchboardv1.Endpoint, hedge bool) *leg {
	ctx, span := d.startSpan(ctx, call, ep, hedge)
	return &leg{Leg: d.caller.NewLeg(ctx, call.upstream(ep), ep), hedge: hedge, span: span}
}

// upstream is the request a leg on ep sends, and how its answer is passed
// on to the client.
func (c Call) upstream(ep *switchboardv1.Endpoint) upstream.Request {
	return upstream.Request{
		ID:             c.RequestID,
		Stream:         c.Stream,
		IncludeUsage:   c.IncludeUsage,
		Body:           c.Body,
		Rewriter:       c.rewriter(ep),
		EstimatedUsage: c.estimatedUsage(ep),
		Quality:        c.Quality,
		Messages:       c.Messages,
	}
}

// rewriter returns the rewriter of answers from ep for this call.
func (c Call) rewriter(ep *switchboardv1.Endpoint) rewrite.Rewriter {
	price := ep.GetPrice()
	rw := rewrite.Rewriter{
		Model:     rewrite.String(c.Model),
		Provider:  rewrite.String(ep.GetProvider()),
		KeepUsage: !c.Stream || c.IncludeUsage,
		Cost: func(u pricing.Usage) float64 {
			cost, _ := invoice.Charge(u, price, c.Caps)
			return cost
		},
	}
	if c.RequestID != "" {
		rw.ID = rewrite.String(c.RequestID)
	}
	if !c.Stream {
		rw.AddUsage = c.estimatedUsage(ep)
	}
	return rw
}

// estimatedUsage returns the usage object of an answer from ep whose
// provider reported none, for the generated text delivered, with what the
// client is billed for it.
func (c Call) estimatedUsage(ep *switchboardv1.Endpoint) func(deliveredBytes int64) json.RawMessage {
	price := ep.GetPrice()
	return func(deliveredBytes int64) json.RawMessage {
		u := invoice.Estimate(c.PromptTokens, deliveredBytes, c.GrantCaps.GetMaxOutputTokens())
		cost, _ := invoice.Charge(u, price, c.Caps)
		return rewrite.UsageJSON(u, cost)
	}
}
