package dashboard

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// statusMessage is a gRPC error's message, for the page.
func statusMessage(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}

type attemptRow struct {
	Endpoint string  `json:"endpoint"`
	Provider string  `json:"provider"`
	Outcome  string  `json:"outcome"`
	HTTP     int32   `json:"http_status"`
	Hedge    bool    `json:"hedge"`
	CostUSD  float64 `json:"cost_usd"`
}

type callRow struct {
	ID           string       `json:"id"`
	Time         time.Time    `json:"time"`
	Model        string       `json:"model"`
	Provider     string       `json:"provider"`
	Endpoint     string       `json:"endpoint"`
	Status       string       `json:"status"`
	HTTP         int32        `json:"http_status"`
	Stream       bool         `json:"stream"`
	Attempts     []attemptRow `json:"attempts"`
	Hedged       bool         `json:"hedged"`
	HedgeWinner  string       `json:"hedge_winner,omitempty"`
	InputTokens  int64        `json:"input_tokens"`
	CachedTokens int64        `json:"cached_input_tokens"`
	OutputTokens int64        `json:"output_tokens"`
	CostUSD      float64      `json:"cost_usd"`
	DurationMS   float64      `json:"duration_ms"`
	TTFTms       float64      `json:"ttft_ms"`
}

// statusNames are the filter's values, by the record's status.
var statusNames = map[switchboardv1.CallStatus]string{
	switchboardv1.CallStatus_CALL_STATUS_OK:               "ok",
	switchboardv1.CallStatus_CALL_STATUS_FAILED:           "failed",
	switchboardv1.CallStatus_CALL_STATUS_INTERRUPTED:      "interrupted",
	switchboardv1.CallStatus_CALL_STATUS_CLIENT_CANCELLED: "cancelled",
}

func callOf(r *switchboardv1.ActivityRecord) callRow {
	c := callRow{ID: r.GetId(), Time: r.GetCreateTime().AsTime().UTC(), Model: r.GetModel(), Provider: r.GetProvider(),
		Endpoint: r.GetEndpointId(), Status: statusNames[r.GetStatus()], HTTP: r.GetHttpStatus(), Stream: r.GetStream(),
		Hedged: r.GetHedge().GetUsed(), HedgeWinner: r.GetHedge().GetWinnerEndpointId(),
		InputTokens: r.GetUsage().GetInputTokens(), CachedTokens: r.GetUsage().GetCachedInputTokens(),
		OutputTokens: r.GetUsage().GetOutputTokens(), CostUSD: r.GetCostUsd(),
		DurationMS: float64(r.GetDuration().AsDuration()) / float64(time.Millisecond),
		TTFTms:     float64(r.GetTtft().AsDuration()) / float64(time.Millisecond)}
	if c.Status == "" {
		c.Status = "unknown"
	}
	for _, a := range r.GetAttempts() {
		c.Attempts = append(c.Attempts, attemptRow{Endpoint: a.GetEndpointId(), Provider: a.GetProvider(),
			Outcome: strings.ToLower(strings.TrimPrefix(switchboardv1.EnumName(a.GetOutcome()), "OUTCOME_")),
			HTTP:    a.GetHttpStatus(), Hedge: a.GetHedge(), CostUSD: a.GetCostUsd()})
	}
	return c
}

// maxScan bounds the records one answer reads: a status filter that
// matches little stops there and hands back a cursor to go on from.
const maxScan = 5000

// calls is a page of the tenant's calls, newest first: ?model= (an id or
// alias), ?status= (ok, failed, interrupted, cancelled), ?limit= (1-200,
// default 50), ?cursor= (the last page's next_cursor).
func (d *Dashboard) calls(w http.ResponseWriter, r *http.Request, s session) {
	q := r.URL.Query()
	limit := 50
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 200 {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "limit must be between 1 and 200")
			return
		}
		limit = n
	}
	want := q.Get("status")
	if want != "" {
		known := false
		for _, n := range statusNames {
			known = known || n == want
		}
		if !known {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "status must be one of ok, failed, interrupted, cancelled")
			return
		}
	}
	ctx, v := d.o.Catalog.Pin(r.Context())
	ctx, err := d.callContext(ctx, v, s)
	if err != nil {
		writeError(w, http.StatusUnauthorized, "unauthenticated", err.Error())
		return
	}
	out := []callRow{}
	cursor := q.Get("cursor")
	// Each read asks for no more records than the page still needs, so a
	// page never ends inside what was read and the server's cursor is the
	// next page's.
	for scanned := 0; len(out) < limit && scanned < maxScan; {
		resp, err := d.o.RPC.ListActivity(ctx, &switchboardv1.ListActivityRequest{
			Identity: &switchboardv1.Identity{TenantId: s.Tenant}, Model: q.Get("model"), Limit: int32(limit - len(out)), Cursor: cursor,
		})
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", statusMessage(err))
			return
		}
		scanned += len(resp.GetRecords())
		cursor = resp.GetNextCursor()
		for _, rec := range resp.GetRecords() {
			if rec.GetTenantId() != s.Tenant {
				continue // never another's: the server scoped it already
			}
			if c := callOf(rec); want == "" || c.Status == want {
				out = append(out, c)
			}
		}
		if cursor == "" {
			break
		}
	}
	writeJSON(w, map[string]any{"tenant": s.Tenant, "calls": out, "next_cursor": cursor})
}

// spend is the tenant's spend over the last ?hours= (1-168, default 24),
// per bin (a minute for up to 2 hours, else an hour): the bins' start
// (Unix seconds), their cost (USD) and calls, read from its activity.
func (d *Dashboard) spend(w http.ResponseWriter, r *http.Request, s session) {
	hours := 24
	if h := r.URL.Query().Get("hours"); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n < 1 || n > 168 {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "hours must be between 1 and 168")
			return
		}
		hours = n
	}
	bin := time.Hour
	if hours <= 2 {
		bin = time.Minute
	}
	now := d.o.Now()
	end := now.Truncate(bin).Add(bin)
	start := end.Add(-time.Duration(hours) * time.Hour)
	n := int(end.Sub(start) / bin)
	times := make([]int64, n)
	cost := make([]float64, n)
	calls := make([]int, n)
	for i := range n {
		times[i] = start.Add(time.Duration(i) * bin).Unix()
	}
	ctx, v := d.o.Catalog.Pin(r.Context())
	ctx, err := d.callContext(ctx, v, s)
	if err != nil {
		writeError(w, http.StatusUnauthorized, "unauthenticated", err.Error())
		return
	}
	cursor, scanned, total := "", 0, 0.0
	for {
		resp, err := d.o.RPC.ListActivity(ctx, &switchboardv1.ListActivityRequest{
			Identity: &switchboardv1.Identity{TenantId: s.Tenant}, Limit: 500, Cursor: cursor,
			StartTime: timestamppb.New(start), EndTime: timestamppb.New(end),
		})
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", statusMessage(err))
			return
		}
		for _, rec := range resp.GetRecords() {
			if rec.GetTenantId() != s.Tenant {
				continue
			}
			i := int(rec.GetCreateTime().AsTime().Sub(start) / bin)
			if i >= 0 && i < n {
				cost[i] += rec.GetCostUsd()
				calls[i]++
				total += rec.GetCostUsd()
			}
		}
		scanned += len(resp.GetRecords())
		cursor = resp.GetNextCursor()
		if cursor == "" || scanned >= maxScan*4 {
			break
		}
	}
	writeJSON(w, map[string]any{"tenant": s.Tenant, "bin_seconds": bin.Seconds(), "times": times, "cost_usd": cost,
		"calls": calls, "total_usd": total, "truncated": cursor != ""})
}
