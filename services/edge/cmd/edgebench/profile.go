package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/childproc"
)

// fetch GETs a debug-listener URL and returns the body.
func fetch(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil) //nolint:gosec // G704: a debug listener this program started.
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req) //nolint:gosec // G704: as above.
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b, nil
}

// goMemory is a Go process's live heap plus goroutine stacks, after a
// garbage collection, read from its debug listener.
func goMemory(ctx context.Context, debugAddr string) (int64, error) {
	b, err := fetch(ctx, "http://"+debugAddr+"/debug/pprof/heap?debug=1&gc=1")
	if err != nil {
		return 0, err
	}
	heap, err1 := parseMemStat(b, "HeapAlloc")
	stacks, err2 := parseMemStat(b, "Stack")
	return heap + stacks, errors.Join(err1, err2)
}

// profile runs switchboard under c=64 streaming while it takes a CPU and
// an allocation profile of the edge and the decider, saves them in
// cfg.profileDir and prints their top entries.
func profile(ctx context.Context, cfg config, sb target, sys *system, w io.Writer) error {
	if err := os.MkdirAll(cfg.profileDir, 0o750); err != nil {
		return err
	}
	secs := strconv.Itoa(cfg.profileSeconds)
	type job struct{ file, url, index string }
	var jobs []job
	for _, c := range []*childproc.Child{sys.edge, sys.decider} {
		base := "http://" + c.Debug + "/debug/pprof/"
		jobs = append(jobs,
			job{c.Name + ".cpu.pprof", base + "profile?seconds=" + secs, ""},
			job{c.Name + ".allocs.pprof", base + "allocs?seconds=" + secs, "alloc_space"})
	}
	fmt.Fprintf(w, "profiling edge and decider for %ss under c=64 streaming into %s ...\n", secs, cfg.profileDir)
	loadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := drive(loadCtx, sb, load{conc: 64, stream: true}, cfg.warmup, time.Duration(cfg.profileSeconds+1)*time.Second, nil)
		done <- err
	}()
	if !sleep(ctx, cfg.warmup) {
		return ctx.Err()
	}
	var wg sync.WaitGroup
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		wg.Go(func() {
			b, err := fetch(ctx, j.url)
			if err == nil {
				err = os.WriteFile(filepath.Join(cfg.profileDir, j.file), b, 0o600) //nolint:gosec // G703: the directory the operator named.
			}
			errs[i] = err
		})
	}
	wg.Wait()
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) { // the load ends with its context, cancelled here
		return err
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, j := range jobs {
		path := filepath.Join(cfg.profileDir, j.file)
		top, err := pprofTop(ctx, path, j.index)
		if err != nil {
			fmt.Fprintf(w, "%s: go tool pprof: %v\n", path, err)
			continue
		}
		txt := path + ".top.txt"
		if err := os.WriteFile(txt, top, 0o600); err != nil {
			return err
		}
		fmt.Fprintf(w, "\n%s (go tool pprof -top -nodecount=10):\n%s", path, top)
		// The top 25 by cumulative time too, saved only: which calls of the
		// program's own code the time goes under.
		if cum, err := pprofTop(ctx, path, j.index, "-cum", "-nodecount=25"); err == nil {
			if err := os.WriteFile(path+".cum.txt", cum, 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// pprofTop is the top 10 entries of a profile by `go tool pprof -top`.
func pprofTop(ctx context.Context, path, sampleIndex string, extra ...string) ([]byte, error) {
	args := append([]string{"tool", "pprof", "-top", "-nodecount=10"}, extra...)
	if sampleIndex != "" {
		args = append(args, "-sample_index="+sampleIndex)
	}
	out, err := exec.CommandContext(ctx, "go", append(args, path)...).CombinedOutput() //nolint:gosec // G204: go tool pprof on a file this program wrote.
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, out)
	}
	return out, nil
}
