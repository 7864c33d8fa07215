package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// request is one logical request a scenario's client sends.
type request struct {
	tenant    *tenant
	model     string
	prompt    string
	maxTokens int64
	stream    bool
	// leaveAfter, for a stream, is the number of content tokens after
	// which the client disconnects; 0 reads to the end.
	leaveAfter int64
}

// result is what a client saw of one request.
type result struct {
	tenant, class string
	start, end    time.Time
	// status is the HTTP status, 0 when no answer came (a transport error).
	status int
	// errCode and errType are the OpenAI error's code and type, of the
	// error body or of an error event in a stream.
	errCode, errType string
	// reason and scope are x-switchboard-ratelimit-reason and -scope.
	reason, scope string
	retryAfter    string
	// retries is x-switchboard-retries, -1 when absent.
	retries  int
	id       string // the completion id (x-switchboard-request-id)
	provider string
	// tokens is the content tokens the client received (one per chunk of
	// a stream, one per word of a whole answer).
	tokens int64
	// left is set when the client disconnected on purpose, mid-stream.
	left bool
	// stream is set for a streamed request; done when it ended with [DONE].
	stream, done bool
	err          error
}

func (r result) latency() time.Duration { return r.end.Sub(r.start) }

// completed reports whether the client got its answer: a 200 whose
// stream, if any, ended with [DONE] or was left on purpose, with no error
// event.
func (r result) completed() bool {
	return r.status == http.StatusOK && r.err == nil && r.errCode == "" && (!r.stream || r.done || r.left)
}

// client sends requests to the edge.
type client struct {
	base string
	http *http.Client
	// timeout bounds one request, whatever its class: a request still
	// unanswered by then is lost.
	timeout time.Duration
}

func newClient(base string, timeout time.Duration) *client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &client{base: base, http: &http.Client{Transport: tr}, timeout: timeout}
}

func (c *client) close() { c.http.CloseIdleConnections() }

// errLeft ends a stream the client leaves on purpose.
var errLeft = errors.New("client left")

// do sends r and reads its answer.
func (c *client) do(ctx context.Context, r request) (res result) {
	res = result{tenant: r.tenant.id, class: r.tenant.class, retries: -1, stream: r.stream, start: time.Now()}
	defer func() { res.end = time.Now() }()
	body := map[string]any{
		"model":      r.model,
		"max_tokens": r.maxTokens,
		"messages":   []map[string]string{{"role": "user", "content": r.prompt}},
	}
	if r.stream {
		body["stream"] = true
		body["stream_options"] = map[string]bool{"include_usage": true}
	}
	b, _ := json.Marshal(body) // a map of strings and numbers always marshals
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/chat/completions", bytes.NewReader(b))
	if err != nil {
		res.err = err
		return res
	}
	req.Header.Set("Authorization", "Bearer "+r.tenant.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Switchboard-Workload", r.tenant.class)
	resp, err := c.http.Do(req)
	if err != nil {
		res.err = err
		return res
	}
	defer func() { _ = resp.Body.Close() }()
	res.status = resp.StatusCode
	h := resp.Header
	res.reason, res.scope = h.Get("x-switchboard-ratelimit-reason"), h.Get("x-switchboard-ratelimit-scope")
	res.retryAfter = h.Get("Retry-After")
	res.id, res.provider = h.Get("x-switchboard-request-id"), h.Get("x-switchboard-provider")
	if v := h.Get("x-switchboard-retries"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			res.retries = n
		}
	}
	if resp.StatusCode != http.StatusOK {
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			res.err = err
			return res
		}
		res.errCode, res.errType = errorOf(raw)
		if res.errCode == "" && res.errType == "" {
			res.err = errors.New("error answer without an OpenAI error body")
		}
		return res
	}
	if !r.stream {
		var a struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			res.err = err
			return res
		}
		if len(a.Choices) > 0 {
			res.tokens = int64(len(strings.Fields(a.Choices[0].Message.Content)))
		}
		return res
	}
	res.err = readStream(resp.Body, r.leaveAfter, &res)
	if errors.Is(res.err, errLeft) {
		res.err, res.left = nil, true
		cancel() // the disconnection itself: the edge sees the client go away
	}
	return res
}

// readStream reads an SSE answer, counting content chunks, until [DONE],
// an error event, or leaveAfter tokens (errLeft).
func readStream(body io.Reader, leaveAfter int64, res *result) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			res.done = true
			return nil
		}
		var ev struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Error *struct {
				Code string `json:"code"`
				Type string `json:"type"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return err
		}
		if ev.Error != nil {
			res.errCode, res.errType = ev.Error.Code, ev.Error.Type
			if res.errCode == "" {
				res.errCode = "stream_error"
			}
			return nil
		}
		if len(ev.Choices) > 0 && ev.Choices[0].Delta.Content != "" {
			res.tokens++
			if leaveAfter > 0 && res.tokens >= leaveAfter {
				return errLeft
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}

// errorOf reads an OpenAI error body's code and type.
func errorOf(raw []byte) (code, typ string) {
	var e struct {
		Error struct {
			Code any    `json:"code"`
			Type string `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &e) != nil {
		return "", ""
	}
	switch c := e.Error.Code.(type) {
	case string:
		code = c
	case float64:
		code = strconv.FormatFloat(c, 'f', -1, 64)
	}
	if code == "" && e.Error.Type != "" {
		code = e.Error.Type
	}
	return code, e.Error.Type
}

// prompt is a user message of about n prompt tokens (pkg/tokens counts a
// quarter token per byte).
func prompt(n int, salt string) string {
	var b strings.Builder
	b.WriteString(salt)
	for b.Len() < 4*n {
		b.WriteString(" lorem ipsum dolor sit amet")
	}
	return b.String()
}
