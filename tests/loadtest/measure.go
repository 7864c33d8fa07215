package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
)

// ProviderStats reads a simulated provider's own counters from its admin
// endpoint, as any outside observer would.
func ProviderStats(ctx context.Context, hc *http.Client, providerURL string) (provsim.Stats, error) {
	var st provsim.Stats
	base := strings.TrimSuffix(providerURL, "/v1")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/admin/stats", nil)
	if err != nil {
		return st, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return st, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s/admin/stats: %s", base, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// setModel replaces a simulated provider's model through its admin
// endpoint.
func setModel(ctx context.Context, hc *http.Client, providerURL, id, body string) error {
	base := strings.TrimSuffix(providerURL, "/v1")
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/admin/models/"+id, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode/100 != 2 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("PUT %s/admin/models/%s: %s: %s", base, id, resp.Status, raw)
	}
	return nil
}

// counters is what one provider received for one upstream model, or what
// the activity log says one tenant was admitted and charged.
type counters struct {
	requests, input, output int64
}

// of is the amount of unit in c.
func (c counters) of(unit string) float64 {
	switch unit {
	case "requests":
		return float64(c.requests)
	case "input_tokens":
		return float64(c.input)
	case "output_tokens":
		return float64(c.output)
	case "total_tokens":
		return float64(c.input + c.output)
	}
	return 0
}

// activity lists every record of the tenant's key since start from the
// edge's GET /v1/activity, all pages.
func activity(ctx context.Context, hc *http.Client, edgeURL, key string, start time.Time) ([]*switchboardv1.ActivityRecord, error) {
	var out []*switchboardv1.ActivityRecord
	cursor := ""
	for {
		q := url.Values{"start": {start.UTC().Format(time.RFC3339Nano)}, "limit": {"500"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, edgeURL+"/activity?"+q.Encode(), nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		_ = resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET /v1/activity: %s: %s", resp.Status, raw)
		}
		recs, next, err := ParseActivityPage(raw)
		if err != nil {
			return nil, fmt.Errorf("GET /v1/activity: %w", err)
		}
		out = append(out, recs...)
		if next == "" || len(recs) == 0 {
			return out, nil
		}
		cursor = next
	}
}

// dispatched reports whether the record's request reached a provider: a
// request the broker admitted. (A request refused before dispatch calls
// no endpoint.)
func dispatched(rec *switchboardv1.ActivityRecord) bool { return len(rec.GetAttempts()) > 0 }

// recordCounters sums what the activity log charged: one request per
// dispatched record and its billed usage.
func recordCounters(recs []*switchboardv1.ActivityRecord) counters {
	var c counters
	for _, r := range recs {
		if !dispatched(r) {
			continue
		}
		c.requests++
		c.input += r.GetUsage().GetInputTokens()
		c.output += r.GetUsage().GetOutputTokens()
	}
	return c
}

// retriesOf is the record's retries: its attempts beyond the first, hedge
// legs left out (a hedge is a second call in parallel, not a retry).
func retriesOf(rec *switchboardv1.ActivityRecord) int {
	n := 0
	for _, a := range rec.GetAttempts() {
		if !a.GetHedge() {
			n++
		}
	}
	return max(0, n-1)
}

// percentile is the p-th percentile (0-100) of ds by nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(p/100*float64(len(s)) + 0.999999)
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// fairShares is the weighted max-min fair division of total between
// tenants with these demands and weights: each gets at most its demand,
// and what one does not use is shared by the others in proportion to
// their weights.
func fairShares(total float64, demand, weight []float64) []float64 {
	n := len(demand)
	out := make([]float64, n)
	active := make([]bool, n)
	for i := range active {
		active[i] = demand[i] > 0
	}
	left := total
	for left > 1e-9 {
		var w float64
		for i := range n {
			if active[i] {
				w += weight[i]
			}
		}
		if w == 0 {
			break
		}
		var capped []int
		for i := range n {
			if active[i] && out[i]+left*weight[i]/w >= demand[i] {
				capped = append(capped, i)
			}
		}
		if len(capped) == 0 {
			for i := range n {
				if active[i] {
					out[i] += left * weight[i] / w
				}
			}
			break
		}
		for _, i := range capped {
			left -= demand[i] - out[i]
			out[i], active[i] = demand[i], false
		}
	}
	return out
}
