package responses

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/switchboard-ai/switchboard/services/edge/internal/clientapi"
)

// Response is the Responses API's Response object: the non-streamed
// answer, and the state a stream's response.* events carry.
type Response struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"`
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"`
	Background         bool               `json:"background"`
	Error              *ResponseError     `json:"error"`
	IncompleteDetails  *IncompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int64             `json:"max_output_tokens"`
	Model              string             `json:"model"`
	Output             []*Item            `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	PromptCacheKey     *string            `json:"prompt_cache_key"`
	Reasoning          ReasoningConfig    `json:"reasoning"`
	Store              bool               `json:"store"`
	Temperature        json.RawMessage    `json:"temperature"`
	Text               any                `json:"text"`
	ToolChoice         any                `json:"tool_choice"`
	Tools              []any              `json:"tools"`
	TopP               json.RawMessage    `json:"top_p"`
	Truncation         string             `json:"truncation"`
	Usage              *Usage             `json:"usage"`
	User               *string            `json:"user"`
	Metadata           map[string]string  `json:"metadata"`
	// Provider names the provider that served the answer, as the edge's
	// chat completions do.
	Provider string `json:"provider,omitempty"`
}

// ResponseError is a failed response's error.
type ResponseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// IncompleteDetails says why a response is incomplete.
type IncompleteDetails struct {
	Reason string `json:"reason"`
}

// ReasoningConfig repeats the request's reasoning effort.
type ReasoningConfig struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

// Usage is the Responses API's token accounting, with the edge's cost of
// the answer (USD) as the chat API reports it.
type Usage struct {
	InputTokens         int64               `json:"input_tokens"`
	InputTokensDetails  InputTokensDetails  `json:"input_tokens_details"`
	OutputTokens        int64               `json:"output_tokens"`
	OutputTokensDetails OutputTokensDetails `json:"output_tokens_details"`
	TotalTokens         int64               `json:"total_tokens"`
	Cost                json.RawMessage     `json:"cost,omitempty"`
}

// InputTokensDetails counts the input tokens read from the prompt cache.
type InputTokensDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// OutputTokensDetails counts the output tokens spent reasoning.
type OutputTokensDetails struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

// Item is one output item: a message, a function call or the provider's
// reasoning.
type Item struct {
	Type   string
	ID     string
	Status string
	// Text is a message's output_text, or a reasoning item's text.
	Text strings.Builder
	// CallID, Name and Arguments are a function call's.
	CallID    string
	Name      string
	Arguments strings.Builder
	// added is set while the item is answered as when it was added (a
	// stream's output_item.added): empty and in progress.
	added bool
}

// Item kinds.
const (
	kindMessage   = "message"
	kindCall      = "function_call"
	kindReasoning = "reasoning"
)

// MarshalJSON implements [json.Marshaler]: each kind of item in its own
// shape.
func (it *Item) MarshalJSON() ([]byte, error) {
	switch it.Type {
	case kindMessage:
		content := []any{}
		if !it.added {
			content = append(content, textPart(it.Text.String()))
		}
		return json.Marshal(struct {
			ID      string `json:"id"`
			Type    string `json:"type"`
			Status  string `json:"status"`
			Role    string `json:"role"`
			Content []any  `json:"content"`
		}{it.ID, it.Type, it.Status, "assistant", content})
	case kindCall:
		return json.Marshal(struct {
			ID        string `json:"id"`
			Type      string `json:"type"`
			Status    string `json:"status"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		}{it.ID, it.Type, it.Status, it.CallID, it.Name, it.Arguments.String()})
	default:
		content := []any{}
		if !it.added {
			content = append(content, reasoningPart(it.Text.String()))
		}
		return json.Marshal(struct {
			ID      string `json:"id"`
			Type    string `json:"type"`
			Summary []any  `json:"summary"`
			Content []any  `json:"content"`
		}{it.ID, it.Type, []any{}, content})
	}
}

// textPart is a message's output_text content part.
func textPart(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

// reasoningPart is a reasoning item's reasoning_text content part.
func reasoningPart(text string) map[string]any {
	return map[string]any{"type": "reasoning_text", "text": text}
}

// usageOf converts a chat usage, none of its counts below zero.
func usageOf(u *clientapi.ChatUsage) *Usage {
	out := &Usage{InputTokens: max(u.PromptTokens, 0), OutputTokens: max(u.CompletionTokens, 0)}
	if d := u.PromptTokensDetails; d != nil {
		out.InputTokensDetails.CachedTokens = min(max(d.CachedTokens, 0), out.InputTokens)
	}
	if d := u.CompletionTokensDetails; d != nil {
		out.OutputTokensDetails.ReasoningTokens = min(max(d.ReasoningTokens, 0), out.OutputTokens)
	}
	out.TotalTokens = out.InputTokens + out.OutputTokens
	if !null(u.Cost) {
		out.Cost = u.Cost
	}
	return out
}

// ResponseID is the id of the response to the request with the edge's
// request id reqID: "resp_" and the id's own part, so either leads to the
// other.
func ResponseID(reqID string) string {
	return "resp_" + strings.TrimPrefix(reqID, "gen-")
}

// itemID is the id of the response's output item at index i of kind.
func itemID(respID, kind string, i int) string {
	prefix := map[string]string{kindMessage: "msg_", kindCall: "fc_", kindReasoning: "rs_"}[kind]
	return fmt.Sprintf("%s%s_%d", prefix, strings.TrimPrefix(respID, "resp_"), i)
}

// callID is a function call's call_id: the provider's id, or one made
// from the item's when the provider sent none.
func callID(id, itemID string) string {
	if id != "" {
		return id
	}
	return "call_" + strings.TrimPrefix(itemID, "fc_")
}

// newResponse is the Response to req, with no output yet, in progress.
func newResponse(respID string, req Request, model string) *Response {
	if model == "" {
		model = req.Model
	}
	e := req.echo
	r := &Response{ID: respID, Object: "response", CreatedAt: req.CreatedAt, Status: "in_progress",
		Instructions: e.Instructions, MaxOutputTokens: e.MaxOutputTokens, Model: model, Output: []*Item{},
		ParallelToolCalls: e.ParallelToolCalls, Reasoning: ReasoningConfig{Effort: e.Effort}, Store: e.Store,
		Temperature: e.Temperature, Text: e.Text, ToolChoice: e.ToolChoice, Tools: e.Tools, TopP: e.TopP,
		Truncation: "disabled", User: e.User, Metadata: e.Metadata}
	if r.Metadata == nil {
		r.Metadata = map[string]string{}
	}
	if r.Tools == nil {
		r.Tools = []any{}
	}
	if r.ToolChoice == nil {
		r.ToolChoice = "auto"
	}
	if r.Text == nil {
		r.Text = map[string]any{"format": map[string]string{"type": "text"}}
	}
	if req.PromptCacheKey != "" {
		k := req.PromptCacheKey
		r.PromptCacheKey = &k
	}
	return r
}

// finish sets the response's status from the chat finish_reason, and
// each item's.
func (r *Response) finish(finish *string) {
	r.Status = "completed"
	if finish != nil {
		switch *finish {
		case "length":
			r.Status, r.IncompleteDetails = "incomplete", &IncompleteDetails{Reason: "max_output_tokens"}
		case "content_filter":
			r.Status, r.IncompleteDetails = "incomplete", &IncompleteDetails{Reason: "content_filter"}
		}
	}
	for _, it := range r.Output {
		it.added = false
		if it.Type == kindMessage && r.Status == "incomplete" {
			it.Status = "incomplete"
		} else {
			it.Status = "completed"
		}
	}
}

// FromChat translates a chat completion body into the Response object.
func FromChat(body []byte, reqID string, req Request) ([]byte, error) {
	a, ch, err := clientapi.ReadCompletion(body)
	if err != nil {
		return nil, err
	}
	r := newResponse(ResponseID(reqID), req, a.Model)
	r.Provider = a.Provider
	add := func(kind string) *Item {
		it := &Item{Type: kind, ID: itemID(r.ID, kind, len(r.Output))}
		r.Output = append(r.Output, it)
		return it
	}
	if text := ch.Message.Reasoning(); text != "" {
		add(kindReasoning).Text.WriteString(text)
	}
	if c := ch.Message.Content; c != nil && *c != "" || len(ch.Message.ToolCalls) == 0 {
		it := add(kindMessage)
		if c != nil {
			it.Text.WriteString(*c)
		}
	}
	for _, tc := range ch.Message.ToolCalls {
		it := add(kindCall)
		it.CallID, it.Name = callID(tc.ID, it.ID), tc.Function.Name
		it.Arguments.WriteString(tc.Function.Arguments)
	}
	r.finish(ch.FinishReason)
	if a.Usage != nil {
		r.Usage = usageOf(a.Usage)
	}
	return json.Marshal(r)
}
