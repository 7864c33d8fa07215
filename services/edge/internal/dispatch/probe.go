package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// MaxProbeTokens caps a probe's prompt so a bad command cannot make the edge
// build a prompt of unbounded size. It is well above the largest size bucket.
const MaxProbeTokens = 1 << 20

// probeOverhead is what a single user message costs besides its text.
var probeOverhead = tokens.Prompt([]tokens.Message{{Role: "user"}})

// ProbePrompt returns a user message text such that a prompt made of that one
// message costs n tokens by the pkg/tokens rule (or the least possible when n
// is smaller than the overhead). The text is repeated words so that it looks
// like prose to a provider, not one giant token.
func ProbePrompt(n int64) string {
	n = min(n, MaxProbeTokens)
	textTokens := max(n-probeOverhead, 0)
	size := int(textTokens * tokens.BytesPerToken)
	if size == 0 {
		return ""
	}
	return strings.Repeat("word ", size/5+1)[:size]
}

// Probe sends the synthetic request the decider asked for to one endpoint,
// streamed, and reports it with the probe's id and no tenant. The answer
// is discarded. Streamed, because only a stream shows when the first token
// came and how fast the rest followed: the decider learns the endpoint's
// first-token time and throughput from it.
func (d *Dispatcher) Probe(ctx context.Context, cmd *switchboardv1.ProbeCommand) error {
	ep := cmd.GetEndpoint()
	if ep == nil || ep.GetBaseUrl() == "" {
		return fmt.Errorf("probe %s: no endpoint", cmd.GetProbeId())
	}
	// The probe's id leads the prompt so no provider can answer it from a
	// prompt cache: a probe measures the uncached speed at this size.
	nonce := "probe " + cmd.GetProbeId() + " "
	text := nonce + ProbePrompt(cmd.GetPromptTokens()-tokens.Text(nonce))
	maxOut := max(cmd.GetMaxOutputTokens(), 1)
	call := Call{
		RequestID:    "probe-" + cmd.GetProbeId(),
		Model:        cmd.GetModel(),
		PromptTokens: tokens.Prompt([]tokens.Message{{Role: "user", Content: text}}),
		ProbeID:      cmd.GetProbeId(),
		Stream:       true,
		IncludeUsage: true,
		Body: func(ep *switchboardv1.Endpoint) ([]byte, error) {
			return json.Marshal(map[string]any{
				"model":          ep.GetUpstreamModel(),
				"messages":       []map[string]string{{"role": "user", "content": text}},
				"max_tokens":     maxOut,
				"stream":         true,
				"stream_options": map[string]bool{"include_usage": true},
			})
		},
	}
	l := d.newLeg(ctx, call, ep, false)
	if l.Open(ctx) {
		l.Deliver(ctx, &discardWriter{})
	}
	l.Close()
	d.report(call, l)
	d.logAttempt(call, l)
	return nil
}

// discardWriter is the client side of a probe: nobody reads the answer.
type discardWriter struct{ h http.Header }

// Header implements [http.ResponseWriter].
func (w *discardWriter) Header() http.Header {
	if w.h == nil {
		w.h = http.Header{}
	}
	return w.h
}

// Write implements [http.ResponseWriter].
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// WriteHeader implements [http.ResponseWriter].
func (w *discardWriter) WriteHeader(int) {}

// Flush implements [http.Flusher] so the stream path can flush unconditionally.
func (w *discardWriter) Flush() {}
