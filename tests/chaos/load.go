package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// answer is what one client request got.
type answer struct {
	tenant, edge string
	start, end   time.Time
	status       int
	// id, provider and usage are the answer's, for a 200.
	id, provider             string
	promptTokens, completion int64
	cost                     float64
	code                     string // the error code of a refusal
}

// workload is one kind of client: a tenant's key and model, how its
// requests are shaped, and how many clients send them through each edge.
type workload struct {
	tenant, key, model string
	perEdge            int
	stream             bool
	promptTokens       int
	maxTokens          int
	// pause is the wait after an answer before the next request; after a
	// refusal or an error the client waits refusedPause.
	pause, refusedPause time.Duration
}

// workloads is the steady load: the requests-per-minute tenant well above
// its 50 a minute, the leased tenant well above its 120 a minute, the
// concurrency tenant with fifteen clients for its 4 slots, and the hedge
// tenant's large streams.
func workloads() []workload {
	return []workload{
		{tenant: tenantRPM, key: keyRPM, model: modelRPM, perEdge: 2, promptTokens: 20, maxTokens: 4, pause: 200 * time.Millisecond, refusedPause: 300 * time.Millisecond},
		{tenant: tenantLease, key: keyLease, model: modelLease, perEdge: 1, promptTokens: 20, maxTokens: 4, pause: 150 * time.Millisecond, refusedPause: 250 * time.Millisecond},
		{tenant: tenantConc, key: keyConc, model: modelConc, perEdge: 5, promptTokens: 20, maxTokens: 16, pause: 10 * time.Millisecond, refusedPause: 50 * time.Millisecond},
		{tenant: tenantHedge, key: keyHedge, model: modelHedge, perEdge: 1, stream: true, promptTokens: hedgeTokens + 50, maxTokens: 4, pause: 400 * time.Millisecond, refusedPause: 400 * time.Millisecond},
	}
}

// recorder collects every answer of the run.
type recorder struct {
	mu      sync.Mutex
	answers []answer
}

func (r *recorder) add(a answer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers = append(r.answers, a)
}

func (r *recorder) all() []answer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]answer(nil), r.answers...)
}

// runLoad sends every workload through every edge until ctx ends; the
// requests themselves run under reqCtx, so that the end of the load lets
// the requests in flight finish (one cut would look, at the providers,
// like a call nobody was answered for).
// The requests-per-minute tenants' clients (rpm's and lease's) wait for
// rpmGo: their buckets are full when they start, and their first bursts
// are granted in the seconds before the owner is killed.
func runLoad(ctx, reqCtx context.Context, hc *http.Client, edges []*edge, rec *recorder, rpmGo <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	n := 0
	for _, w := range workloads() {
		for _, e := range edges {
			for range w.perEdge {
				n++
				prompt := fmt.Sprintf("client %d ", n) + strings.Repeat("word", w.promptTokens)
				wg.Go(func() {
					if w.tenant == tenantRPM || w.tenant == tenantLease {
						select {
						case <-ctx.Done():
						case <-rpmGo:
						}
					}
					for ctx.Err() == nil {
						a := ask(reqCtx, hc, e, w.tenant, w.key, w.model, prompt, w.maxTokens, w.stream, "")
						if reqCtx.Err() != nil && a.status == 0 {
							return // cut by the end of the run, not answered
						}
						rec.add(a)
						wait := w.pause
						if a.status != http.StatusOK {
							wait = w.refusedPause
						}
						select {
						case <-ctx.Done():
						case <-time.After(wait):
						}
					}
				})
			}
		}
	}
	return &wg
}

// ask sends one chat request through edge e. provider, when not empty, is
// the request's provider preferences (JSON).
func ask(ctx context.Context, hc *http.Client, e *edge, tenant, key, model, prompt string, maxTokens int, stream bool, provider string) answer {
	body := map[string]any{"model": model, "max_tokens": maxTokens, "messages": []map[string]string{{"role": "user", "content": prompt}}}
	if stream {
		body["stream"] = true
		body["stream_options"] = map[string]bool{"include_usage": true}
	}
	if provider != "" {
		body["provider"] = json.RawMessage(provider)
	}
	raw, _ := json.Marshal(body)
	a := answer{tenant: tenant, edge: e.name, start: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/chat/completions", bytes.NewReader(raw))
	if err != nil {
		a.code = err.Error()
		return a
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		a.code = "transport"
		a.end = time.Now()
		return a
	}
	defer func() { _ = resp.Body.Close() }()
	a.status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		_ = json.Unmarshal(b, &e)
		a.code = e.Error.Code
		a.end = time.Now()
		return a
	}
	take := func(m map[string]any) {
		if v, ok := m["id"].(string); ok && v != "" {
			a.id = v
		}
		if v, ok := m["provider"].(string); ok && v != "" {
			a.provider = v
		}
		if u, ok := m["usage"].(map[string]any); ok {
			if v, ok := u["prompt_tokens"].(float64); ok {
				a.promptTokens = int64(v)
			}
			if v, ok := u["completion_tokens"].(float64); ok {
				a.completion = int64(v)
			}
			if v, ok := u["cost"].(float64); ok {
				a.cost = v
			}
		}
	}
	if !stream {
		var m map[string]any
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&m); err != nil {
			a.status, a.code = 0, "unreadable answer"
		} else {
			take(m)
		}
		a.end = time.Now()
		return a
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	done := false
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var m map[string]any
		if json.Unmarshal([]byte(data), &m) == nil {
			if _, isErr := m["error"]; isErr {
				break
			}
			take(m)
		}
	}
	if !done {
		a.status, a.code = 0, "stream cut"
	}
	a.end = time.Now()
	return a
}
