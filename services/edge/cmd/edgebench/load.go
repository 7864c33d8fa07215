package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// newRequest is the one chat completion every target gets.
func newRequest(ctx context.Context, url, key, model string, stream bool) *http.Request {
	body := `{"model":"` + model + `","messages":[{"role":"user","content":"Say hello to the benchmark."}],"stream":false}`
	if stream {
		body = body[:len(body)-len("false}")] + "true}"
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	return req
}

// target is one of the three systems driven.
type target struct {
	name  string
	url   string // the chat completions URL
	slow  string // the chat completions URL of slow streams
	model string // the model asked for, and for slow streams slowModel
	slowM string
	key   string
	pids  map[string]int // the processes whose CPU is charged to this target
}

// load is one closed-loop load: conc clients, each sending its next
// request as soon as its last answer ended.
type load struct {
	conc   int
	stream bool
	slow   bool
}

// sample is what one run of a load against a target measured.
type sample struct {
	ok, errs  int
	elapsed   time.Duration
	latencies []time.Duration // sorted
	ttfc      []time.Duration // time to the first body bytes, sorted
	cpu       map[string]time.Duration
}

func (s sample) rps() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.ok) / s.elapsed.Seconds()
}

// cpuPerReq is CPU time per completed request, in microseconds.
func (s sample) cpuPerReq(proc string) float64 {
	if s.ok == 0 {
		return 0
	}
	return float64(s.cpu[proc]) / float64(time.Microsecond) / float64(s.ok)
}

// newClient is a load generator's HTTP client: one connection per client
// kept alive, no compression.
func newClient(conc int) (*http.Client, *http.Transport) {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		MaxIdleConns:        conc + 16,
		MaxIdleConnsPerHost: conc + 16,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr}, tr
}

// drive runs l against t for warmup, then measures for dur. midway, if set,
// is called once in the middle of the measurement with the requests open
// then.
func drive(ctx context.Context, t target, l load, warmup, dur time.Duration, midway func(inflight int)) (sample, error) {
	client, tr := newClient(l.conc)
	defer tr.CloseIdleConnections()
	url, model := t.url, t.model
	if l.slow {
		url, model = t.slow, t.slowM
	}
	return closedLoop(ctx, l.conc, warmup, dur, t.pids, midway, func(ctx context.Context, buf []byte) (time.Duration, time.Duration, error) {
		return call(ctx, client, newRequest(ctx, url, t.key, model, l.stream), l.stream, buf)
	})
}

// closedLoop runs one from conc clients, each calling again as soon as its
// last call returned, for warmup, then measures for dur: the calls that
// ended in the measurement, their latency and time to first byte, and the
// CPU each process of pids used. midway, if set, is called once in the
// middle of the measurement with the calls open then. Each client's one
// gets a buffer of its own to read into.
func closedLoop(ctx context.Context, conc int, warmup, dur time.Duration, pids map[string]int, midway func(inflight int),
	one func(ctx context.Context, buf []byte) (lat, first time.Duration, err error),
) (sample, error) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		measuring atomic.Bool
		inflight  atomic.Int64
		wg        sync.WaitGroup
		mu        sync.Mutex
		all       sample
	)
	for range conc {
		wg.Go(func() {
			var lat, first []time.Duration
			ok, errs := 0, 0
			buf := make([]byte, 4096)
			for runCtx.Err() == nil {
				inflight.Add(1)
				d, f, err := one(runCtx, buf)
				inflight.Add(-1)
				if !measuring.Load() {
					continue // ended in the warm-up or after the measurement
				}
				if err != nil {
					if runCtx.Err() == nil {
						errs++
					}
					continue
				}
				ok++
				lat = append(lat, d)
				first = append(first, f)
			}
			mu.Lock()
			all.ok += ok
			all.errs += errs
			all.latencies = append(all.latencies, lat...)
			all.ttfc = append(all.ttfc, first...)
			mu.Unlock()
		})
	}
	if !sleep(ctx, warmup) {
		cancel()
		wg.Wait()
		return sample{}, ctx.Err()
	}
	before := readCPU(pids)
	measuring.Store(true)
	start := time.Now()
	if midway != nil {
		if sleep(ctx, dur/2) {
			midway(int(inflight.Load()))
		}
		sleep(ctx, dur-time.Since(start))
	} else {
		sleep(ctx, dur)
	}
	measuring.Store(false)
	all.elapsed = time.Since(start)
	after := readCPU(pids)
	cancel()
	wg.Wait()
	all.cpu = map[string]time.Duration{}
	for name, c := range after {
		all.cpu[name] = c - before[name]
	}
	slices.Sort(all.latencies)
	slices.Sort(all.ttfc)
	return all, ctx.Err()
}

// call sends req and reads the whole answer, returning its latency and the
// time to its first body bytes. A stream must end with [DONE].
func call(ctx context.Context, client *http.Client, req *http.Request, stream bool, buf []byte) (lat, first time.Duration, err error) {
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return 0, 0, errors.New(resp.Status)
	}
	var tail []byte // the last bytes read, to find [DONE]
	n := 0
	for {
		k, rerr := resp.Body.Read(buf)
		if k > 0 {
			if n == 0 {
				first = time.Since(start)
			}
			n += k
			tail = append(tail, buf[:k]...)
			if len(tail) > 64 {
				tail = tail[len(tail)-64:]
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return 0, 0, rerr
		}
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
	}
	lat = time.Since(start)
	if n == 0 {
		return 0, 0, errors.New("empty answer")
	}
	if stream && !bytes.Contains(tail, []byte("data: [DONE]")) {
		return 0, 0, errors.New("stream cut before [DONE]")
	}
	return lat, first, nil
}

// readCPU reads the CPU time of every process of pids; one that cannot be
// read counts 0.
func readCPU(pids map[string]int) map[string]time.Duration {
	out := make(map[string]time.Duration, len(pids))
	for name, pid := range pids {
		c, _ := cpuTime(pid)
		out[name] = c
	}
	return out
}

// sleep waits d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
