package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
)

// validateContext is the context length of both endpoints of the model the
// validation tests route to, so a prompt can be too long for every one.
const validateContext = 4096

// startValidationSystem is a decider, an edge and two simulated providers
// of one model, each endpoint with a known context length.
func startValidationSystem(t *testing.T) *stack {
	t.Helper()
	return startStack(t, stackOptions{sim: twoSim, catalog: func(url func(string) string) string {
		return fmt.Sprintf(`
models:
  - id: %[1]s
    endpoints:
      - {provider: alpha, base_url: %[2]s, upstream_model: %[4]s, price: {input: 0.10, output: 0.50}, context_length: %[6]d}
      - {provider: beta,  base_url: %[3]s, upstream_model: %[4]s, price: {input: 0.20, output: 0.60}, context_length: %[6]d}
tenants:
  - {id: acme, api_keys_sha256: [%[5]s]}
`, model, url("alpha"), url("beta"), simModel, catalog.HashKey(testKey), validateContext)
	}})
}

// upstreamCalls is how many requests the providers received in all.
func (s *stack) upstreamCalls() int64 {
	var n int64
	for _, p := range []string{"alpha", "beta"} {
		n += s.sim.Provider(p).Stats().Requests
	}
	return n
}

// TestEdgeRefusesWhatOpenAIRefuses sends, from outside, bodies OpenAI's
// chat completions API refuses and the edge once sent on to a provider
// (invalid UTF-8, garbage tools, tool_choice and response_format, an
// unknown role, a temperature of -5 or "hot") or refused without saying
// which field (max_tokens 0), and a prompt too long for every endpoint.
// Each is a 400 in OpenAI's error shape naming the field and OpenAI's code,
// and no provider sees any of them.
func TestEdgeRefusesWhatOpenAIRefuses(t *testing.T) {
	s := startValidationSystem(t)
	msgs := `"messages":[{"role":"user","content":"hello"}]`
	chat := func(extra string) string {
		return `{"model":"` + model + `",` + msgs + extra + `}`
	}
	tests := []struct {
		name, body, param, code string
		// msg, when set, is a pattern the error's message matches.
		msg string
	}{
		{name: "invalid UTF-8 in a message", body: `{"model":"` + model + `","messages":[{"role":"user","content":"caf` + "\xe9" + `"}]}`,
			param: "messages", code: "invalid_value"},
		{name: "tools a string", body: chat(`,"tools":"all"`), param: "tools", code: "invalid_type"},
		{name: "tool name with spaces", body: chat(`,"tools":[{"type":"function","function":{"name":"get weather"}}]`),
			param: "tools[0].function.name", code: "invalid_value"},
		{name: "tool without function", body: chat(`,"tools":[{"type":"function"}]`), param: "tools[0].function", code: "missing_required_parameter"},
		{name: "tool_choice unknown", body: chat(`,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes"`),
			param: "tool_choice", code: "invalid_value"},
		{name: "tool_choice names an undeclared tool", body: chat(`,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}`),
			param: "tool_choice.function.name", code: "invalid_value"},
		{name: "response_format xml", body: chat(`,"response_format":{"type":"xml"}`), param: "response_format.type", code: "invalid_value"},
		{name: "temperature -5", body: chat(`,"temperature":-5`), param: "temperature", code: "decimal_below_min_value"},
		{name: "temperature hot", body: chat(`,"temperature":"hot"`), param: "temperature", code: "invalid_type"},
		{name: "role wizard", body: `{"model":"` + model + `","messages":[{"role":"wizard","content":"hello"}]}`, param: "messages[0].role", code: "invalid_value"},
		{name: "max_tokens 0", body: chat(`,"max_tokens":0`), param: "max_tokens", code: "integer_below_min_value"},
		{name: "tool message without tool_call_id", body: `{"model":"` + model + `","messages":[{"role":"user","content":"q"},{"role":"tool","content":"r"}]}`,
			param: "messages[1].tool_call_id", code: "missing_required_parameter"},
		{name: "max_tokens a string", body: chat(`,"max_tokens":"10"`), param: "max_tokens", code: "invalid_type"},
		{name: "stream a string", body: chat(`,"stream":"yes"`), param: "stream", code: "invalid_type"},
		{name: "messages an object", body: `{"model":"` + model + `","messages":{}}`, param: "messages", code: "invalid_type"},
		{name: "top_p above 1", body: chat(`,"top_p":1.5`), param: "top_p", code: "decimal_above_max_value"},
		{name: "prompt over every endpoint's context", body: `{"model":"` + model + `","messages":[{"role":"user","content":"` + longPrompt(2*validateContext) + `"}]}`,
			param: "messages", code: "context_length_exceeded",
			msg: `^This model's maximum context length is 4096 tokens\. However, your messages resulted in \d+ tokens\. Please reduce the length of the messages\.$`},
		{name: "prompt and max_tokens over every endpoint's context", body: `{"model":"` + model + `","max_tokens":2000,"messages":[{"role":"user","content":"` + longPrompt(3000) + `"}]}`,
			param: "messages", code: "context_length_exceeded",
			msg: `^This model's maximum context length is 4096 tokens\. However, you requested \d+ tokens \(\d+ in the messages, 2000 in the completion\)\. Please reduce the length of the messages or completion\.$`},
	}
	before := s.upstreamCalls()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, hdr, body := s.postCapped(t, tt.body)
			require.Equal(t, http.StatusBadRequest, code, body)
			require.Equal(t, "false", hdr.Get("X-Should-Retry"))
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &e), body)
			require.Equal(t, "invalid_request_error", e.Error.Type, body)
			require.NotNil(t, e.Error.Param, body)
			require.Equal(t, tt.param, *e.Error.Param, body)
			require.NotNil(t, e.Error.Code, body)
			require.Equal(t, tt.code, *e.Error.Code, body)
			require.NotEmpty(t, e.Error.Message)
			if tt.msg != "" {
				require.Regexp(t, tt.msg, e.Error.Message)
			}
		})
	}
	require.Equal(t, before, s.upstreamCalls(), "no refused request reached a provider")

	// What is valid is served.
	code, _, body := s.postCapped(t, chat(`,"temperature":0.5,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],"tool_choice":"auto"`))
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, before+1, s.upstreamCalls())
}

// TestSDKDoesNotRetryARefusedRequest: the official OpenAI SDK, with its
// default retries, sends a refused request once and surfaces the field and
// code.
func TestSDKDoesNotRetryARefusedRequest(t *testing.T) {
	s := startValidationSystem(t)
	var calls atomic.Int32
	var retryHeader atomic.Value
	counting := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		calls.Add(1)
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err == nil {
			retryHeader.Store(resp.Header.Get("X-Should-Retry"))
		}
		return resp, err
	})}
	client := openai.NewClient(option.WithBaseURL(s.edge.URL()+"/"), option.WithAPIKey(testKey),
		option.WithHTTPClient(counting), option.WithMaxRetries(2))
	_, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:       model,
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
		Temperature: openai.Float(-5),
	})
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	require.Equal(t, "temperature", apiErr.Param)
	require.Equal(t, "decimal_below_min_value", apiErr.Code)
	require.EqualValues(t, 1, calls.Load(), "a 400 is not retried by the SDK")
	require.NotEqual(t, "true", retryHeader.Load())
	require.Zero(t, s.upstreamCalls())
}

// TestMessagesPromptTooLong: the Messages API refuses a prompt longer than
// every endpoint's context as Anthropic does — invalid_request_error,
// "prompt is too long: M tokens > N maximum", or the prompt and max_tokens
// together — and no provider sees it.
func TestMessagesPromptTooLong(t *testing.T) {
	s := startValidationSystem(t)
	tests := []struct {
		name, body, msg string
	}{
		{name: "prompt", body: `{"model":"` + model + `","max_tokens":16,"messages":[{"role":"user","content":"` + longPrompt(2*validateContext) + `"}]}`,
			msg: `^prompt is too long: \d+ tokens > 4096 maximum$`},
		{name: "prompt and max_tokens", body: `{"model":"` + model + `","max_tokens":2000,"messages":[{"role":"user","content":"` + longPrompt(3000) + `"}]}`,
			msg: "^input length and `max_tokens` exceed context limit: \\d+ \\+ 2000 > 4096, decrease input length or `max_tokens` and try again$"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.edge.URL()+"/messages", strings.NewReader(tt.body))
			require.NoError(t, err)
			req.Header.Set("x-api-key", testKey)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%+v", e)
			require.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
			require.Equal(t, "error", e.Type)
			require.Equal(t, "invalid_request_error", e.Error.Type)
			require.Regexp(t, tt.msg, e.Error.Message)
		})
	}
	require.Zero(t, s.upstreamCalls())
}
