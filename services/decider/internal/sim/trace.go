package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// TraceRecord is one recorded request, one JSON object per line of a trace.
type TraceRecord struct {
	// At is when the request arrived, in seconds after the trace's start. (Required)
	At float64 `json:"at"`
	// Model is the model asked for. (Optional) Defaults to the traffic's model.
	Model string `json:"model,omitempty"`
	// Conversation groups the turns of one session: a turn's prompt starts
	// with the previous turn's, so a provider may read it from cache. (Optional)
	Conversation string `json:"conversation,omitempty"`
	// PromptTokens is the prompt's size. (Required, > 0)
	PromptTokens Tokens `json:"prompt_tokens"`
	// OutputTokens is the answer's size. (Required)
	OutputTokens Tokens `json:"output_tokens"`
	// MaxTokens is the request's max_tokens. (Optional)
	MaxTokens Tokens `json:"max_tokens,omitempty"`
	// Stream says whether the request streams. (Optional)
	Stream bool `json:"stream,omitempty"`
	// Sort is the request's provider.sort: price, latency or throughput. (Optional)
	Sort string `json:"sort,omitempty"`
}

// maxTraceLine bounds one line of a trace.
const maxTraceLine = 1 << 16

// ParseTrace reads a JSONL trace: one TraceRecord per line, blank lines
// ignored. Every problem is reported with its line; records are returned in
// arrival order.
func ParseTrace(r io.Reader) ([]TraceRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxTraceLine)
	var out []TraceRecord
	var errs []error
	bad := func(line int, format string, args ...any) {
		errs = append(errs, &FieldError{File: "trace", Line: line, Field: "record", Msg: fmt.Sprintf(format, args...)})
	}
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var rec TraceRecord
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			bad(line, "%v", err)
			continue
		}
		if dec.More() {
			bad(line, "one JSON object per line")
			continue
		}
		n := len(errs)
		if !(rec.At >= 0) || math.IsInf(rec.At, 0) || rec.At > float64(366*24*3600) {
			bad(line, "at must be seconds in [0, one year]")
		}
		if rec.PromptTokens <= 0 {
			bad(line, "prompt_tokens must be positive")
		}
		if rec.OutputTokens < 0 || rec.MaxTokens < 0 {
			bad(line, "output_tokens and max_tokens must not be negative")
		}
		if _, ok := sorts[rec.Sort]; rec.Sort != "" && !ok {
			bad(line, "sort must be price, latency or throughput")
		}
		if len(errs) == n {
			out = append(out, rec)
		}
		if len(errs) > 20 {
			errs = append(errs, errors.New("trace: too many errors"))
			break
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("trace: %w", err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	slices.SortStableFunc(out, func(a, b TraceRecord) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
	return out, nil
}

// traceSessions turns a trace into sessions: each conversation one session
// whose turns arrive at their recorded times, each other record its own.
func traceSessions(recs []TraceRecord, start time.Time, model string) []*session {
	var out []*session
	byConv := map[string]*session{}
	for _, rec := range recs {
		m := rec.Model
		if m == "" {
			m = model
		}
		at := start.Add(time.Duration(rec.At * float64(time.Second)))
		t := turn{prompt: int64(rec.PromptTokens), output: int64(rec.OutputTokens), maxTokens: int64(rec.MaxTokens), at: at, sort: rec.Sort, stream: rec.Stream}
		if rec.Conversation != "" {
			if s, ok := byConv[rec.Conversation]; ok {
				s.turns = append(s.turns, t)
				continue
			}
		}
		s := &session{id: len(out), model: m, start: at, fixedTimes: true, turns: []turn{t}}
		if rec.Conversation != "" {
			s.conversation = true
			byConv[rec.Conversation] = s
		}
		out = append(out, s)
	}
	return out
}
