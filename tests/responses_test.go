package tests

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"
)

// streamEvents reads a Responses stream to its end: its events' types,
// checking each event's sequence_number follows the one before from 0,
// and its last event.
func streamEvents(t *testing.T, stream interface {
	Next() bool
	Current() responses.ResponseStreamEventUnion
	Err() error
}) (types []string, last responses.ResponseStreamEventUnion) {
	t.Helper()
	for stream.Next() {
		ev := stream.Current()
		require.Equal(t, int64(len(types)), ev.SequenceNumber, "event %d (%s)", len(types), ev.Type)
		types = append(types, ev.Type)
		last = ev
	}
	require.NoError(t, stream.Err())
	return types, last
}

// squeeze drops repeated event types in a row: one delta stands for a run.
func squeeze(types []string) []string {
	var out []string
	for _, ty := range types {
		if len(out) == 0 || out[len(out)-1] != ty {
			out = append(out, ty)
		}
	}
	return out
}

// usageCost is the edge's cost of an answer, as its usage carries it.
func usageCost(t *testing.T, u responses.ResponseUsage) float64 {
	t.Helper()
	f, ok := u.JSON.ExtraFields["cost"]
	require.True(t, ok, "usage.cost is set: %s", u.RawJSON())
	var cost float64
	require.NoError(t, json.Unmarshal([]byte(f.Raw()), &cost))
	return cost
}

func TestResponsesThroughEdgeWithOpenAISDK(t *testing.T) {
	s := startSystem(t)
	client := s.client()
	ctx := t.Context()
	params := responses.ResponseNewParams{
		Model:        model,
		Instructions: openai.String("You are terse."),
		// The simulator writes max_output_tokens tokens and stops for length.
		MaxOutputTokens: openai.Int(16),
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String(longPrompt(600) + " tell me about routing")},
		Store:           openai.Bool(false),
	}

	// Non-streaming.
	var httpResp *http.Response
	resp, err := client.Responses.New(ctx, params, option.WithResponseInto(&httpResp))
	require.NoError(t, err)
	reqID := httpResp.Header.Get("X-Request-Id")
	require.Equal(t, "resp_"+strings.TrimPrefix(reqID, "gen-"), resp.ID)
	require.Equal(t, "response", string(resp.Object))
	require.Equal(t, responses.ResponseStatusIncomplete, resp.Status)
	require.Equal(t, "max_output_tokens", resp.IncompleteDetails.Reason)
	require.Equal(t, model, resp.Model)
	require.Positive(t, resp.CreatedAt)
	require.Len(t, resp.Output, 1)
	msg := resp.Output[0].AsMessage()
	require.Equal(t, "message", resp.Output[0].Type)
	require.Len(t, msg.Content, 1)
	require.Equal(t, "output_text", msg.Content[0].Type)
	require.Contains(t, resp.OutputText(), "word", "the simulator echoes the prompt's words")
	require.Equal(t, int64(16), resp.Usage.OutputTokens)
	require.Positive(t, resp.Usage.InputTokens)
	require.Zero(t, resp.Usage.InputTokensDetails.CachedTokens, "first sight of this prompt")
	require.Equal(t, resp.Usage.InputTokens+16, resp.Usage.TotalTokens)
	require.Positive(t, usageCost(t, resp.Usage))
	require.Contains(t, resp.JSON.ExtraFields, "provider")
	firstInput := resp.Usage.InputTokens

	// The same prompt again is read from the provider's cache: the
	// Responses API's input_tokens include the cached ones.
	resp, err = client.Responses.New(ctx, params)
	require.NoError(t, err)
	require.Positive(t, resp.Usage.InputTokensDetails.CachedTokens)
	require.Equal(t, firstInput, resp.Usage.InputTokens)

	// Streaming: OpenAI's event sequence, and the text the deltas add up to.
	stream := client.Responses.NewStreaming(ctx, params)
	var text strings.Builder
	var types []string
	var last responses.ResponseStreamEventUnion
	for stream.Next() {
		ev := stream.Current()
		require.Equal(t, int64(len(types)), ev.SequenceNumber)
		types = append(types, ev.Type)
		if ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
			require.Equal(t, int64(0), ev.OutputIndex)
			require.NotEmpty(t, ev.ItemID)
		}
		if ev.Type == "response.output_text.done" {
			require.Equal(t, text.String(), ev.Text)
		}
		last = ev
	}
	require.NoError(t, stream.Err())
	require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.incomplete"}, squeeze(types))
	final := last.AsResponseIncomplete().Response
	require.Equal(t, responses.ResponseStatusIncomplete, final.Status)
	require.Equal(t, text.String(), final.OutputText())
	require.Equal(t, int64(16), final.Usage.OutputTokens)
	require.Equal(t, firstInput, final.Usage.InputTokens)
	require.Positive(t, final.Usage.InputTokensDetails.CachedTokens)
	require.Positive(t, usageCost(t, final.Usage))

	// The activity record is the chat pipeline's, and says which API the
	// request came in by.
	rec := s.activityRecord(t, reqID)
	require.Equal(t, "responses", rec.APIType)
	require.Equal(t, model, rec.Model)
	require.Equal(t, "ok", rec.Status)
}

func TestResponsesToolTurnThroughEdge(t *testing.T) {
	s := startSystem(t)
	client := s.client()
	ctx := t.Context()
	tools := []responses.ToolUnionParam{responses.ToolParamOfFunction("read_file",
		map[string]any{"type": "object", "properties": map[string]any{"word": map[string]any{"type": "string"}}}, false)}
	// Codex CLI's session header.
	opts := []option.RequestOption{option.WithHeader("session_id", "019a9544-7ab1-73c1-837e-1fa681f4462b")}
	// The simulator calls the tool a directive names.
	ask := responses.ResponseInputItemParamOfMessage("open [[provsim:tool=read_file]]", responses.EasyInputMessageRoleUser)
	params := responses.ResponseNewParams{Model: model, Tools: tools, MaxOutputTokens: openai.Int(16),
		ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsAuto)},
		Input:      responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{ask}}}

	resp, err := client.Responses.New(ctx, params, opts...)
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusCompleted, resp.Status)
	require.Len(t, resp.Output, 2)
	require.Equal(t, "message", resp.Output[0].Type)
	call := resp.Output[1].AsFunctionCall()
	require.Equal(t, "function_call", resp.Output[1].Type)
	require.Equal(t, "read_file", call.Name)
	require.NotEmpty(t, call.CallID)
	require.True(t, strings.HasPrefix(call.ID, "fc_"), call.ID)
	require.Equal(t, responses.ResponseFunctionToolCallStatusCompleted, call.Status)
	require.JSONEq(t, `{"word":"open"}`, call.Arguments)

	// Streamed, the call is an item of its own after the text, its
	// arguments in deltas.
	stream := client.Responses.NewStreaming(ctx, params, opts...)
	var args strings.Builder
	var done responses.ResponseFunctionToolCall
	var types []string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.function_call_arguments.delta":
			require.Equal(t, int64(1), ev.OutputIndex)
			args.WriteString(ev.Delta)
		case "response.output_item.done":
			if ev.Item.Type == "function_call" {
				done = ev.Item.AsFunctionCall()
			}
		}
	}
	require.NoError(t, stream.Err())
	require.Equal(t, "response.completed", types[len(types)-1])
	require.Contains(t, types, "response.function_call_arguments.done")
	require.JSONEq(t, `{"word":"open"}`, args.String())
	require.Equal(t, "read_file", done.Name)
	require.Equal(t, args.String(), done.Arguments)

	// The tool's output goes back with the whole conversation, and the
	// answer is text, complete.
	text := resp.Output[0].AsMessage().ToParam()
	params.Input.OfInputItemList = responses.ResponseInputParam{ask,
		{OfOutputMessage: &text},
		responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name),
		{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{CallID: openai.String(call.CallID),
			Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("package main")}}},
		responses.ResponseInputItemParamOfMessage("now explain", responses.EasyInputMessageRoleUser),
	}
	// Without max_output_tokens the simulator ends its answer itself.
	params = responses.ResponseNewParams{Model: model, Tools: tools, Input: params.Input}
	resp, err = client.Responses.New(ctx, params, opts...)
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusCompleted, resp.Status)
	require.Len(t, resp.Output, 1)
	require.True(t, strings.HasPrefix(resp.OutputText(), "now explain"), "the simulator echoes the last user text: %q", resp.OutputText())
}

// TestResponsesRefusedThroughEdge: what the gateway cannot serve is
// refused in OpenAI's error shape, naming the parameter.
func TestResponsesRefusedThroughEdge(t *testing.T) {
	s := startSystem(t)
	client := s.client()
	ctx := t.Context()
	params := responses.ResponseNewParams{Model: model, MaxOutputTokens: openai.Int(16),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}

	// The gateway keeps no responses: a previous_response_id is refused,
	// never ignored.
	withPrev := params
	withPrev.PreviousResponseID = openai.String("resp_abc")
	_, err := client.Responses.New(ctx, withPrev)
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	require.Equal(t, "previous_response_id", apiErr.Param)
	require.Equal(t, "invalid_request_error", apiErr.Type)
	require.Contains(t, apiErr.Message, "keeps no responses")
	require.Contains(t, apiErr.Message, "store: false")

	bad := openai.NewClient(option.WithBaseURL(s.edge.URL()+"/"), option.WithAPIKey("sk-not-a-key"), option.WithMaxRetries(0))
	_, err = bad.Responses.New(ctx, params)
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)

	for _, tt := range []struct {
		name, body, param, code string
	}{
		{"unknown parameter", `{"model":"` + model + `","input":"hi","max_tokens":20}`, "max_tokens", "unknown_parameter"},
		{"conversation", `{"model":"` + model + `","input":"hi","conversation":"conv_1"}`, "conversation", "unsupported_value"},
		{"hosted tool", `{"model":"` + model + `","input":"hi","tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]}`, "tools[0].type", "unsupported_value"},
		{"item", `{"model":"` + model + `","input":[{"type":"message","role":"robot","content":"hi"}]}`, "input[0].role", "invalid_value"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := s.send(t, testKey, http.MethodPost, "/responses", tt.body)
			require.Equal(t, http.StatusBadRequest, status, string(body))
			var e struct {
				Error struct {
					Type, Param, Code, Message string
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(body, &e), string(body))
			require.Equal(t, tt.param, e.Error.Param, string(body))
			require.Equal(t, tt.code, e.Error.Code, string(body))
			require.Equal(t, "invalid_request_error", e.Error.Type)
		})
	}
}

// TestResponsesProviderFailuresThroughEdge: the chat pipeline's refusals
// reach a Responses client with their status and headers, and a stream
// cut after its first tokens ends with response.failed.
func TestResponsesProviderFailuresThroughEdge(t *testing.T) {
	s := startSystem(t)
	client := s.client()
	ctx := t.Context()
	ask := func(text string) responses.ResponseNewParams {
		return responses.ResponseNewParams{Model: model, MaxOutputTokens: openai.Int(16),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(text)}}
	}

	_, err := client.Responses.New(ctx, ask("[[provsim:fault=rate_limit]] hi"))
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode)
	require.NotEmpty(t, apiErr.Response.Header.Get("Retry-After"))
	require.Equal(t, "rate_limit_exceeded", apiErr.Code)

	// Refused before the stream began: the same error, not a stream.
	stream := client.Responses.NewStreaming(ctx, ask("[[provsim:fault=rate_limit]] hi"))
	require.False(t, stream.Next())
	require.True(t, errors.As(stream.Err(), &apiErr), "%v", stream.Err())
	require.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode)
	require.NotEmpty(t, apiErr.Response.Header.Get("Retry-After"))

	// Every provider overloaded: the chat pipeline's 503, as it is (OpenAI's
	// clients retry it).
	_, err = client.Responses.New(ctx, ask("[[provsim:fault=overloaded]] hi"))
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusServiceUnavailable, apiErr.StatusCode)
	require.NotEmpty(t, apiErr.Message)

	stream = client.Responses.NewStreaming(ctx, ask("[[provsim:fault=drop]] one two three four five six seven eight"))
	types, last := streamEvents(t, stream)
	require.Contains(t, types, "response.output_text.delta", "the stream had begun")
	require.Equal(t, "response.failed", last.Type)
	failed := last.AsResponseFailed().Response
	require.Equal(t, responses.ResponseStatusFailed, failed.Status)
	require.NotEmpty(t, failed.Error.Message)
	require.Equal(t, responses.ResponseErrorCodeServerError, failed.Error.Code)
}

// codexBody is a request shaped as Codex CLI sends it to a custom
// provider: instructions, its environment context as a user message,
// function tools (and web search, which the gateway drops), reasoning,
// include, prompt_cache_key, text.verbosity, client_metadata, a stream.
const codexBody = `{"model":"` + model + `","instructions":"You are Codex, a coding agent.",
 "input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context><cwd>/src</cwd></environment_context>"}]},
  {"type":"message","role":"user","content":[{"type":"input_text","text":"hello world"}]}],
 "tools":[{"type":"function","name":"shell","description":"Runs a shell command","strict":false,
   "parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}}},"required":["command"],"additionalProperties":false}},
  {"type":"web_search"}],
 "tool_choice":"auto","parallel_tool_calls":false,"reasoning":{"effort":"medium","summary":"auto"},"store":false,"stream":true,
 "include":["reasoning.encrypted_content"],"prompt_cache_key":"019a9544-7ab1-73c1-837e-1fa681f4462b","text":{"verbosity":"medium"},
 "client_metadata":{"x-codex-installation-id":"abc"}}`

// TestResponsesCodexStreamEvents: a Codex CLI request, in raw HTTP, gets
// OpenAI's event sequence, each event named by its data's type and
// numbered in order.
func TestResponsesCodexStreamEvents(t *testing.T) {
	s := startSystem(t)
	status, header, body := s.send(t, testKey, http.MethodPost, "/responses", codexBody,
		"OpenAI-Beta", "responses=experimental", "originator", "codex_cli_rs", "session_id", "019a9544-7ab1-73c1-837e-1fa681f4462b")
	require.Equal(t, http.StatusOK, status, string(body))
	require.Equal(t, "text/event-stream", header.Get("Content-Type"))

	var names []string
	for i, ev := range sseEvents(t, body) {
		require.Equal(t, i, ev.seq, "sequence_number of %s", ev.name)
		names = append(names, ev.name)
	}
	require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.completed"}, squeeze(names))
}

// TestResponsesStickyByCodexSession: Codex CLI's session_id header, and
// without a header the body's prompt_cache_key, name a Responses
// conversation as X-Session-Id does: a turn with an unrelated prompt
// stays on the endpoint of the conversation's first turn.
func TestResponsesStickyByCodexSession(t *testing.T) {
	s := startSticky(t, "{input: 0.20, cached_input: 0.02, output: 0.80}", "{input: 0.12, cached_input: 0.03, output: 0.80}")
	served := map[string]int64{}
	// Both are measured (equally fast), so both qualify for the policy.
	for _, p := range []string{"warm", "plain"} {
		got, _ := s.post(t, otherKey, chat("measure-"+p, stickyPromptTokens, `"provider":{"only":["`+p+`"]},`))
		require.Equal(t, p, got)
		served[p]++
		s.learnt(t, p, served[p])
	}
	ask := func(uniq, extra string, header ...string) (provider, route string) {
		body := `{"model":"` + model + `",` + extra + `"max_output_tokens":16,"input":"` + uniq + " " + longPrompt(stickyPromptTokens) + `"}`
		provider, route, stream := s.postTo(t, "/responses", testKey, body, header...)
		require.Contains(t, stream, "event: response.incomplete")
		return provider, route
	}
	const session = "019a9544-7ab1-73c1-837e-1fa681f4462b"
	p, route := ask("cx-1", `"provider":{"only":["plain"]},`, "session_id", session)
	require.Equal(t, "plain", p)
	require.Contains(t, route, "sticky=new")
	p, route = ask("cx-2", "", "session_id", session)
	require.Equal(t, "plain", p, route)
	require.Contains(t, route, "sticky=kept")

	p, route = ask("pk-1", `"prompt_cache_key":"conv-pk","provider":{"only":["plain"]},`)
	require.Equal(t, "plain", p)
	require.Contains(t, route, "sticky=new")
	p, route = ask("pk-2", `"prompt_cache_key":"conv-pk",`)
	require.Equal(t, "plain", p, route)
	require.Contains(t, route, "sticky=kept")
	// Another key is another conversation.
	_, route = ask("pk-3", `"prompt_cache_key":"another",`)
	require.Contains(t, route, "sticky=new")
}
