package dispatch

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

// messagesUpstream is an endpoint speaking the Messages API: it streams
// fakeupstream.Content in two text deltas, with a cache read and a cache
// write in its usage.
func messagesUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/messages" || r.Header.Get("X-Api-Key") != secret {
			http.Error(w, `{"type":"error","error":{"type":"authentication_error","message":"no"}}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		half := len(fakeupstream.Content) / 2
		for _, ev := range []string{
			`{"type":"message_start","message":{"id":"msg_x","type":"message","role":"assistant","model":"up","content":[],"usage":{"input_tokens":4,"cache_read_input_tokens":10,"cache_creation_input_tokens":6,"output_tokens":1}}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + fakeupstream.Content[:half] + `"}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + fakeupstream.Content[half:] + `"}}`,
			`{"type":"content_block_stop","index":0}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`,
			`{"type":"message_stop"}`,
		} {
			_, _ = io.WriteString(w, "event: x\ndata: "+ev+"\n\n")
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestHedgeWonByMessagesEndpoint: a hedge leg to an endpoint that speaks
// the Messages API races as any leg does; it wins over a silent primary,
// and the chat client gets its answer translated, reported and billed with
// its cache write.
func TestHedgeWonByMessagesEndpoint(t *testing.T) {
	ups, eps := upstreams(t, 1)
	ups[0].SetMode(fakeupstream.HangAfterHeaders)
	native := endpoint("b", messagesUpstream(t).URL+"/v1")
	native.Api = switchboardv1.EndpointApi_ENDPOINT_API_ANTHROPIC
	native.Price = &switchboardv1.Price{Input: 3, CachedInput: 0.5, CacheWrite: 4, CacheWrite_1H: 6, Output: 2}
	eps = append(eps, native)
	rec, b := &recorder{}, newBudget(true)
	b.onAcquire = func() { <-ups[0].Arrived() }
	d := newHedgeDispatcher(rec, b, 4)
	call := newCall(t, streamBody)
	call.Hedge = hedgePlan(switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, native)
	w := httptest.NewRecorder()

	require.NoError(t, d.Serve(t.Context(), w, call, eps))
	requireOneAnswer(t, w, "b")
	require.NotContains(t, w.Body.String(), "msg_x", "the edge's id, not the provider's")
	waitFor(t, ups[0].Cancelled(), "the slow primary to see its request cancelled")

	hedge := reportOf(t, rec, "b/m")
	require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, hedge.GetOutcome())
	require.True(t, hedge.GetHedge())
	require.NotNil(t, hedge.GetTtft())
	u := hedge.GetUsage()
	require.Equal(t, []int64{20, 10, 6, 0, 2}, []int64{u.GetInputTokens(), u.GetCachedInputTokens(), u.GetCacheWriteTokens(),
		u.GetCacheWrite_1HTokens(), u.GetOutputTokens()})
	require.InDelta(t, (4*3+10*0.5+6*4+2*2)/1e6, u.GetCostUsd(), 1e-12)
	r := rec.records()[0]
	require.Equal(t, "b/m", r.GetEndpointId())
	require.Equal(t, "b/m", r.GetHedge().GetWinnerEndpointId())
	require.InDelta(t, (4*3+10*0.5+6*4+2*2)/1e6, r.GetCostUsd(), 1e-12, "billed at the write price")
	require.True(t, strings.HasSuffix(w.Body.String(), "data: [DONE]\n\n"))
}
