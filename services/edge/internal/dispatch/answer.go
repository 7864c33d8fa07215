package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/switchboard-ai/switchboard/services/edge/internal/sse"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// usage is a provider's token accounting of one answer.
type usage struct {
	input, cached, output int64
}

// chunkInfo is what the edge learns from one answer or stream chunk.
type chunkInfo struct {
	// token is set when the chunk carries a token (see the package comment).
	token bool
	// finish is set when a choice finished.
	finish bool
	// usage is the provider's usage, when the chunk carries it.
	usage *usage
	// errMsg is set when the chunk is an error object instead of an answer.
	errMsg string
}

type choiceView struct {
	Delta *struct {
		Content          *string         `json:"content"`
		ReasoningContent *string         `json:"reasoning_content"`
		Reasoning        *string         `json:"reasoning"`
		ToolCalls        json.RawMessage `json:"tool_calls"`
	} `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

type usageView struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	// PromptCacheHitTokens is DeepSeek's name for cached prompt tokens.
	PromptCacheHitTokens *int64 `json:"prompt_cache_hit_tokens"`
}

var errMalformed = errors.New("malformed answer")

// rewrite inspects one answer or chunk and re-encodes it with model set to
// the canonical model and a top-level provider field. It returns a nil
// output for a usage-only chunk the client did not ask for. Every other field
// passes through unchanged.
func rewrite(data []byte, model, provider json.RawMessage, keepUsage bool) ([]byte, chunkInfo, error) {
	var info chunkInfo
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
		return nil, info, fmt.Errorf("%w: not a JSON object", errMalformed)
	}
	rawChoices, hasChoices := fields["choices"]
	if e, ok := fields["error"]; ok && !isNull(e) && !hasChoices {
		info.errMsg = parseProviderError(data).Message
		if info.errMsg == "" {
			info.errMsg = "provider sent an error"
		}
		return nil, info, nil
	}
	rawUsage, hasUsage := fields["usage"]
	hasUsage = hasUsage && !isNull(rawUsage)
	if !hasChoices && !hasUsage {
		return nil, info, fmt.Errorf("%w: no choices", errMalformed)
	}
	var choices []choiceView
	if hasChoices {
		if err := json.Unmarshal(rawChoices, &choices); err != nil {
			return nil, info, fmt.Errorf("%w: choices: %v", errMalformed, err)
		}
	}
	for _, c := range choices {
		if c.FinishReason != nil && *c.FinishReason != "" {
			info.finish = true
		}
		if c.Delta == nil {
			continue
		}
		if nonEmpty(c.Delta.Content) || nonEmpty(c.Delta.ReasoningContent) || nonEmpty(c.Delta.Reasoning) ||
			(len(c.Delta.ToolCalls) > 0 && !isNull(c.Delta.ToolCalls) && string(bytes.TrimSpace(c.Delta.ToolCalls)) != "[]") {
			info.token = true
		}
	}
	info.token = info.token || info.finish
	if hasUsage {
		var u usageView
		if json.Unmarshal(rawUsage, &u) == nil {
			info.usage = &usage{input: u.PromptTokens, output: u.CompletionTokens}
			switch {
			case u.PromptTokensDetails != nil:
				info.usage.cached = u.PromptTokensDetails.CachedTokens
			case u.PromptCacheHitTokens != nil:
				info.usage.cached = *u.PromptCacheHitTokens
			}
		}
	}
	if !keepUsage {
		if hasUsage && len(choices) == 0 {
			return nil, info, nil
		}
		delete(fields, "usage")
	}
	fields["model"] = model
	fields["provider"] = provider
	return encodeObject(fields), info, nil
}

// encodeObject writes a JSON object from already valid raw values, copying
// each as is: json.Marshal would validate and compact every value again, on
// every chunk of every stream.
func encodeObject(fields map[string]json.RawMessage) []byte {
	keys := make([]string, 0, len(fields))
	size := 2
	for k, v := range fields {
		keys = append(keys, k)
		size += len(k) + len(v) + 4
	}
	slices.Sort(keys)
	buf := make([]byte, 0, size+16)
	buf = append(buf, '{')
	for i, k := range keys {
		if i > 0 {
			buf = append(buf, ',')
		}
		q, _ := json.Marshal(k)
		buf = append(buf, q...)
		buf = append(buf, ':')
		buf = append(buf, bytes.TrimSpace(fields[k])...)
	}
	return append(buf, '}')
}

func nonEmpty(s *string) bool { return s != nil && *s != "" }

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// setAnswerHeaders writes the status line of a successful answer. It is
// called only once the answer is known to be good, so that until then the
// attempt can still be abandoned for another endpoint.
func setAnswerHeaders(w http.ResponseWriter, ep *switchboardv1.Endpoint, stream bool) {
	h := w.Header()
	if stream {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		// Stops nginx-style proxies in front of the edge from buffering the stream.
		h.Set("X-Accel-Buffering", "no")
	} else {
		h.Set("Content-Type", "application/json")
	}
	h.Set("X-Switchboard-Provider", ep.GetProvider())
	w.WriteHeader(http.StatusOK)
}

func (d *Dispatcher) nonStream(ctx, actx context.Context, w http.ResponseWriter, call Call, ep *switchboardv1.Endpoint, resp *http.Response, wd *watchdog, res *result) {
	res.ttft, res.hasTTFT = time.Since(res.start), true
	wd.started()
	raw, err := io.ReadAll(io.LimitReader(watchedReader{r: resp.Body, wd: wd}, maxResponseBytes+1))
	if err != nil {
		d.failTransport(ctx, actx, res, err, true)
		return
	}
	if len(raw) > maxResponseBytes {
		res.fail(switchboardv1.Outcome_OUTCOME_MALFORMED, "answer too large", fmt.Sprintf("answer over %d bytes", maxResponseBytes))
		return
	}
	out, info, err := rewrite(raw, jsonString(call.Model), jsonString(ep.GetProvider()), true)
	switch {
	case err != nil:
		res.fail(switchboardv1.Outcome_OUTCOME_MALFORMED, "malformed answer", err.Error())
		return
	case info.errMsg != "":
		res.fail(switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, "provider sent an error", truncate(info.errMsg, maxErrorText))
		return
	}
	res.usage = info.usage
	res.committed = true
	setAnswerHeaders(w, ep, false)
	if _, err := w.Write(out); err != nil {
		// The provider did its part; the report is about the provider.
		d.log.Debug("client write failed", "request_id", call.RequestID, "error", err)
	}
	res.outcome = switchboardv1.Outcome_OUTCOME_OK
}

func (d *Dispatcher) stream(ctx, actx context.Context, w http.ResponseWriter, call Call, ep *switchboardv1.Endpoint, resp *http.Response, wd *watchdog, res *result) {
	rd := sse.NewReader(watchedReader{r: resp.Body, wd: wd}, 0)
	model, provider := jsonString(call.Model), jsonString(ep.GetProvider())
	rc := http.NewResponseController(w)
	var held [][]byte
	heldBytes := 0
	sawFinish := false

	send := func(events ...[]byte) bool {
		for _, e := range events {
			buf := make([]byte, 0, len(e)+8)
			buf = append(buf, "data: "...)
			buf = append(buf, e...)
			buf = append(buf, "\n\n"...)
			if _, err := w.Write(buf); err != nil {
				return false
			}
		}
		return rc.Flush() == nil
	}
	commit := func() bool {
		wd.started()
		res.committed = true
		setAnswerHeaders(w, ep, true)
		ok := send(held...)
		held = nil
		return ok
	}
	clientGone := func() {
		res.fail(switchboardv1.Outcome_OUTCOME_CANCELLED, "cancelled", "client went away")
	}
	// interrupt ends a stream that already reached the client: the client
	// gets an error event and no [DONE], so it cannot mistake a truncated
	// answer for a complete one.
	interrupt := func() {
		if !res.committed || ctx.Err() != nil {
			return
		}
		ev, _ := json.Marshal(map[string]any{"error": map[string]any{
			"message": "the provider's stream was interrupted: " + res.summary,
			"type":    "upstream_error",
			"code":    "stream_interrupted",
		}})
		send(ev)
	}

	for {
		data, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) && sawFinish {
				// Some providers close after the last chunk without [DONE].
				break
			}
			switch {
			case errors.Is(err, sse.ErrEventTooLarge):
				res.fail(switchboardv1.Outcome_OUTCOME_MALFORMED, "malformed stream", err.Error())
			case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
				if ctx.Err() != nil {
					clientGone()
				} else {
					res.fail(switchboardv1.Outcome_OUTCOME_DROPPED, "stream ended early", "stream ended before [DONE]")
				}
			default:
				d.failTransport(ctx, actx, res, err, true)
			}
			interrupt()
			return
		}
		if string(bytes.TrimSpace(data)) == "[DONE]" {
			break
		}
		out, info, err := rewrite(data, model, provider, call.IncludeUsage)
		if err != nil {
			res.fail(switchboardv1.Outcome_OUTCOME_MALFORMED, "malformed stream chunk", err.Error())
			interrupt()
			return
		}
		if info.errMsg != "" {
			res.fail(switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, "provider sent an error", truncate(info.errMsg, maxErrorText))
			interrupt()
			return
		}
		if info.usage != nil {
			res.usage = info.usage
		}
		sawFinish = sawFinish || info.finish
		if info.token && !res.hasTTFT {
			res.ttft, res.hasTTFT = time.Since(res.start), true
		}
		if out != nil {
			if res.committed {
				if !send(out) {
					clientGone()
					return
				}
			} else {
				held = append(held, out)
				heldBytes += len(out)
			}
		}
		if !res.committed && (info.token || heldBytes > maxHeldBytes) {
			if !commit() {
				clientGone()
				return
			}
		}
	}
	if !res.committed && !commit() {
		clientGone()
		return
	}
	if !send([]byte("[DONE]")) {
		clientGone()
		return
	}
	res.outcome = switchboardv1.Outcome_OUTCOME_OK
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
