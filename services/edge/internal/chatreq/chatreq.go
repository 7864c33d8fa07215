// Package chatreq parses and validates an OpenAI chat-completions request body
// on the edge. It keeps every top-level field as raw JSON, so fields the edge
// does not understand reach the provider unchanged, and derives the typed view
// the decider needs: model, stream flag, token estimate, routing options.
package chatreq

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"unicode/utf8"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/jsonobj"
	"github.com/switchboard-ai/switchboard/services/edge/internal/jsonscan"
)

// Error is a validation failure fit to show the client, in the terms of
// OpenAI's error JSON: Param is the JSON path of the offending field
// ("messages[2].content", "tools[0].function.name"), empty only when no
// single field is at fault; Code is OpenAI's code for the failure (see the
// Code constants); Message says what is wrong, whole.
type Error struct {
	// Param is the JSON path of the offending field, empty for the whole body.
	Param string
	// Message says what is wrong, in terms of the client's request.
	Message string
	// Code is OpenAI's error code for the failure ("invalid_type").
	Code string
}

// Error implements [error].
func (e *Error) Error() string { return e.Message }

// OptionalParameters are the optional request parameters the decider is told
// about, so require_parameters can keep only endpoints supporting them all.
var OptionalParameters = []string{
	"tools", "tool_choice", "response_format", "temperature", "top_p", "top_k",
	"stop", "seed", "frequency_penalty", "presence_penalty", "logprobs",
	"top_logprobs", "logit_bias", "max_tokens", "structured_outputs",
	"parallel_tool_calls",
}

// EndpointParameters are the optional parameters sent only to an endpoint
// whose catalog supported_parameters name them: any other endpoint gets the
// request as if the client had not sent them, never an error. OpenAI's chat
// API refuses top_k, which Anthropic's API and many open-model servers take
// (and Messages requests carry).
var EndpointParameters = []string{"top_k"}

// Request is a validated chat-completions request.
type Request struct {
	// Fields holds every top-level field exactly as the client sent it; the
	// upstream body is built from it, so fields the edge does not know pass
	// through unchanged.
	Fields map[string]json.RawMessage
	// Model is the model the client asked for, suffix included.
	Model string
	// Stream is whether the client asked for server-sent events.
	Stream bool
	// IncludeUsage is the client's own stream_options.include_usage; the edge
	// always asks the provider for usage but forwards the usage chunk only
	// when the client asked for it.
	IncludeUsage bool
	// MaxOutputTokens is max_completion_tokens, else max_tokens, else 0.
	MaxOutputTokens int64
	// Provider holds the routing options, nil when the client sent none.
	Provider *switchboardv1.ProviderPreferences
	// Parameters names the optional parameters present (see OptionalParameters).
	Parameters []string
	// InputTokens is the prompt estimate by the pkg/tokens rule: messages plus
	// the compacted tools and response_format JSON.
	InputTokens int64
	// Prefixes are the chain hashes of the prompt's leading parts at its
	// natural cache boundaries, shortest first, each with its token count:
	// the tool block alone (when there are tools), the end of the leading
	// system and developer messages (when there are any), then each message
	// boundary (messages 1..k) up to the whole prompt, whose hash is
	// PromptHash. At most MaxPrefixes: the tool and system boundaries are
	// always kept, then the longest message boundaries. They go to the
	// decider in Decide and, for the attempt that served the request, in
	// its call report, so a new question after a system prompt an endpoint
	// served is priced with that endpoint's cache. Never empty for a parsed
	// request. See PromptHash.
	Prefixes []*switchboardv1.PromptPrefix
	// PromptHash is the chain hash of the whole prompt. The chain is
	// h(k) = first 8 bytes of SHA-256(h(k-1) || message k in a canonical,
	// length-prefixed form), seeded with the compacted tools JSON, so the
	// hash of a conversation's turn n is a prefix hash of its turn n+1
	// whatever the client's whitespace or key order: the decider learns which
	// endpoint holds a prompt in cache from PromptHash and finds it again in
	// the next request's Prefixes.
	PromptHash uint64

	// upstream is the upstream body but for its model, laid out by Parse
	// from Fields and Stream; nil for a Request not made by Parse.
	upstream *bodyTemplate
}

// MaxPrefixes bounds the prefixes sent per request, and so the entries one
// call report adds to the decider's affinity table: the decider looks at
// the longest ones and at the shared tool and system boundaries, and a
// conversation of hundreds of turns must not make every Decide heavier.
const MaxPrefixes = 32

// wireMessage is a message decoded in one pass over its bytes (see
// decodeMessages, held to json.Unmarshal into this type by its tags): the
// fields whose type the edge checks are decoded as any and checked by a type
// switch, which costs far less than decoding each field again from raw JSON.
// Prompts of 100k tokens are common, so every pass over them shows in the
// latency the gateway adds.
type wireMessage struct {
	Role       any             `json:"role"`
	Name       any             `json:"name"`
	Content    any             `json:"content"`
	ToolCalls  json.RawMessage `json:"tool_calls"`
	Function   json.RawMessage `json:"function_call"`
	ToolCallID any             `json:"tool_call_id"`
}

// Parse decodes and validates a request body. It never panics; every failure
// is an *Error. The Request keeps slices of body (its fields, the pieces of
// its upstream body) rather than copies: body must not be changed or reused
// while the Request is in use.
func Parse(body []byte) (*Request, error) {
	body = bytes.TrimSpace(body)
	if !jsonscan.Valid(body) {
		var v map[string]json.RawMessage
		err := json.Unmarshal(body, &v)
		if err == nil {
			err = errors.New("invalid JSON")
		}
		return nil, &Error{Code: CodeInvalidJSON, Message: "We could not parse the JSON body of your request: " + jsonErrText(err)}
	}
	if body[0] != '{' {
		return nil, &Error{Code: CodeInvalidType, Message: "The request body must be a JSON object, but got " + jsonKind(body) + " instead."}
	}
	fields := splitObject(body)
	if !utf8.Valid(body) {
		return nil, utf8Error(fields)
	}
	r := &Request{Fields: fields}

	model, err := stringField(fields, "model", true)
	if err != nil {
		return nil, err
	}
	if model == "" {
		return nil, emptyStringErr("model")
	}
	r.Model = model

	var seed string
	if present(fields, "tools") {
		seed = compact(fields["tools"])
	}
	msgs, err := parseMessages(fields["messages"], seed)
	if err != nil {
		return nil, err
	}

	if r.Stream, err = boolField(fields, "stream"); err != nil {
		return nil, err
	}
	if r.IncludeUsage, err = parseStreamOptions(fields["stream_options"]); err != nil {
		return nil, err
	}
	maxTokens, err := tokenCountField(fields, "max_tokens")
	if err != nil {
		return nil, err
	}
	maxCompletion, err := tokenCountField(fields, "max_completion_tokens")
	if err != nil {
		return nil, err
	}
	// max_completion_tokens wins over the deprecated max_tokens, as on OpenAI.
	r.MaxOutputTokens = maxTokens
	if present(fields, "max_completion_tokens") {
		r.MaxOutputTokens = maxCompletion
	}
	if err := checkN(fields); err != nil {
		return nil, err
	}
	if err := checkOptions(fields); err != nil {
		return nil, err
	}
	if raw, ok := fields["provider"]; ok {
		if r.Provider, err = parseProvider(raw); err != nil {
			return nil, err
		}
	}
	for _, name := range OptionalParameters {
		if present(fields, name) {
			r.Parameters = append(r.Parameters, name)
		}
	}

	r.InputTokens = tokens.Prompt(msgs.counted)
	for _, name := range []string{"tools", "response_format"} {
		if present(fields, name) {
			r.InputTokens += tokens.Text(compact(fields[name]))
		}
	}
	r.PromptHash = msgs.hashes[len(msgs.hashes)-1]
	r.Prefixes = msgs.prefixes(seed != "")
	// Laid out once for every leg of the request; should it fail, which a
	// validated body cannot, UpstreamBody tries again and says why.
	r.upstream, _ = r.upstreamTemplate()
	return r, nil
}

// UpstreamBody is the body to send to the endpoint ep: the client's body
// with model replaced by the endpoint's upstream name, provider (ours, not
// the provider's business) removed, and so are the EndpointParameters the
// endpoint does not list. A stream always asks for the usage chunk, because
// usage is what the decider learns from; the edge strips it again if the
// client did not ask for it.
//
// The body is a JSON object with its keys sorted and each value as the
// client sent it. Everything but the model is laid out once, when the
// request is parsed; each call only writes the pieces and the model into one
// buffer. It may be called from several goroutines at once (the legs of a
// hedge).
func (r *Request) UpstreamBody(ep *switchboardv1.Endpoint) ([]byte, error) {
	t := r.upstream
	if t == nil {
		var err error
		if t, err = r.upstreamTemplate(); err != nil {
			return nil, err
		}
	}
	upstreamModel := ep.GetUpstreamModel()
	// Sized for a model with nothing to escape, the common case.
	size := len(upstreamModel) + 3
	for _, f := range t.fields {
		size += len(f.head) + len(f.value) + 1
	}
	buf := make([]byte, 0, size)
	for _, f := range t.fields {
		if f.param != "" && !slices.Contains(ep.GetSupportedParameters(), f.param) {
			continue
		}
		if len(buf) == 0 {
			buf = append(buf, '{')
		} else {
			buf = append(buf, ',')
		}
		buf = append(buf, f.head...)
		if f.model {
			buf = jsonobj.AppendString(buf, upstreamModel)
		} else {
			buf = append(buf, f.value...)
		}
	}
	return append(buf, '}'), nil
}

// OutputParam names the field the request bounds its output with, as an
// error about that bound names it: max_completion_tokens when the client
// sent it (it wins over max_tokens), else max_tokens.
func (r *Request) OutputParam() string {
	if present(r.Fields, "max_completion_tokens") {
		return "max_completion_tokens"
	}
	return "max_tokens"
}

// bodyTemplate is the upstream body without its model: its fields in the
// order they are written, each with its value but for the model's. The
// pieces point into the client's body where they are its values.
type bodyTemplate struct {
	fields []templateField
}

type templateField struct {
	// head is the key and its colon.
	head  []byte
	value []byte
	// model marks the model's field, whose value each endpoint has its own.
	model bool
	// param, when set, is the EndpointParameters name of the field: it is
	// sent only to endpoints that list it.
	param string
}

// upstreamTemplate lays out the upstream body from Fields: the object
// jsonobj.Encode writes for the client's fields without provider, with
// stream_options forced to ask for usage on a stream, and a model.
func (r *Request) upstreamTemplate() (*bodyTemplate, error) {
	keys := make([]string, 0, len(r.Fields)+2)
	for k := range r.Fields {
		if k != "provider" && k != "model" && (k != "stream_options" || !r.Stream) {
			keys = append(keys, k)
		}
	}
	keys = append(keys, "model")
	var opts []byte
	if r.Stream {
		opts = usageOnly
		if raw, ok := r.Fields["stream_options"]; ok && !isNull(raw) {
			// Validated as an object by Parse.
			o := map[string]json.RawMessage{}
			if err := json.Unmarshal(raw, &o); err != nil {
				return nil, fmt.Errorf("decode stream_options: %w", err)
			}
			o["include_usage"] = json.RawMessage("true")
			opts = jsonobj.Encode(o)
		}
		keys = append(keys, "stream_options")
	}
	slices.Sort(keys)
	t := &bodyTemplate{fields: make([]templateField, len(keys))}
	size := 0
	for _, k := range keys {
		size += len(k) + 3
	}
	heads := make([]byte, 0, size)
	for i, k := range keys {
		start := len(heads)
		heads = jsonobj.AppendString(heads, k)
		heads = append(heads, ':')
		f := &t.fields[i]
		f.head = heads[start:len(heads):len(heads)]
		switch {
		case k == "model":
			f.model = true
		case k == "stream_options" && r.Stream:
			f.value = opts
		default:
			f.value = bytes.TrimSpace(r.Fields[k])
			if slices.Contains(EndpointParameters, k) {
				f.param = k
			}
		}
	}
	return t, nil
}

// usageOnly is the stream_options of a stream whose client sent none.
var usageOnly = []byte(`{"include_usage":true}`)

type parsedMessages struct {
	counted []tokens.Message
	// hashes[k] is the chain hash of messages 0..k; cumTokens[k] their tokens.
	hashes    []uint64
	cumTokens []int64
	// seedHash is the chain's seed, the hash of the tool block alone;
	// seedTokens its tokens.
	seedHash   uint64
	seedTokens int64
	// system is how many messages lead the prompt with role system or
	// developer.
	system int
}

// prefixes are the prompt's leading parts at its cache boundaries, shortest
// first: the tool block alone when withTools, the end of the leading system
// messages, then the longest message boundaries, MaxPrefixes in all. Every
// message boundary is one, the whole prompt included: a prompt sent again
// as it is (a client's retry, a regenerated answer) is cached where it was
// served, and a fresh prompt still tells the decider which prompt it is —
// one whose prefixes nobody served is cached nowhere. The tool and system
// boundaries are what different conversations share (every user of an
// agent sends the same instructions and tools), and in a long conversation
// they would be the first to fall outside the longest message boundaries,
// so they are kept whatever the prompt's length.
func (m parsedMessages) prefixes(withTools bool) []*switchboardv1.PromptPrefix {
	n := len(m.hashes)
	keep := MaxPrefixes
	var head [2]switchboardv1.PromptPrefix
	heads := head[:0]
	if withTools {
		heads = append(heads, switchboardv1.PromptPrefix{Hash: m.seedHash, Tokens: m.seedTokens})
	}
	// The system boundary is a message boundary; it needs a place of its
	// own only when the longest ones leave it out.
	first := max(0, n-(keep-len(heads)))
	if m.system > 0 && m.system-1 < first {
		heads = append(heads, switchboardv1.PromptPrefix{Hash: m.hashes[m.system-1], Tokens: m.cumTokens[m.system-1]})
		first = max(0, n-(keep-len(heads)))
	}
	// One array holds them all, rather than one allocation each.
	all := make([]switchboardv1.PromptPrefix, 0, len(heads)+n-first)
	all = append(all, heads...)
	for k := first; k < n; k++ {
		all = append(all, switchboardv1.PromptPrefix{Hash: m.hashes[k], Tokens: m.cumTokens[k]})
	}
	out := make([]*switchboardv1.PromptPrefix, len(all))
	for i := range all {
		out[i] = &all[i]
	}
	return out
}

func parseMessages(raw json.RawMessage, seed string) (parsedMessages, error) {
	var out parsedMessages
	if len(raw) == 0 || isNull(raw) {
		return out, missingErr("messages")
	}
	// raw is valid JSON: Parse checked the body.
	msgs, ok := decodeMessages(raw, nil)
	if !ok {
		return out, structureError(raw)
	}
	if len(msgs) == 0 {
		return out, emptyArrayErr("messages")
	}
	out.counted = make([]tokens.Message, 0, len(msgs))
	out.hashes = make([]uint64, 0, len(msgs))
	out.cumTokens = make([]int64, 0, len(msgs))
	h := sha256.New()
	var scratch []byte
	var sum [sha256.Size]byte
	var prev [8]byte
	h.Write([]byte(seed))
	binary.BigEndian.PutUint64(prev[:], binary.BigEndian.Uint64(h.Sum(sum[:0])))
	cum := int64(tokens.PromptOverhead) + tokens.Text(seed)
	out.seedHash, out.seedTokens = binary.BigEndian.Uint64(prev[:]), cum
	leading := true
	for i, m := range msgs {
		role, name, err := checkMessage(m, i)
		if err != nil {
			return out, err
		}
		text, extra, err := contentText(m, role, i)
		if err != nil {
			return out, err
		}
		tm := tokens.Message{Role: role, Name: name, Content: text}
		out.counted = append(out.counted, tm)
		if leading = leading && (role == "system" || role == "developer"); leading {
			out.system = i + 1
		}
		toolCallID, _ := m.ToolCallID.(string)
		h.Reset()
		h.Write(prev[:])
		// Length-prefixed fields, so boundaries cannot be forged by content.
		for _, f := range []string{role, name, text, extra, compact(m.ToolCalls), compact(m.Function), toolCallID} {
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(len(f)))
			h.Write(n[:])
			scratch = writeString(h, f, scratch)
		}
		copy(prev[:], h.Sum(sum[:0])[:8])
		cum += tokens.MessageTokens(tm)
		out.hashes = append(out.hashes, binary.BigEndian.Uint64(prev[:]))
		out.cumTokens = append(out.cumTokens, cum)
	}
	return out, nil
}

// messageParam names message i in an error.
func messageParam(i int) string { return fmt.Sprintf("messages[%d]", i) }

// writeString writes s to w through buf, a piece of at most 512 bytes at
// a time, and returns buf, grown to fit s up to that: a conversion to
// []byte would copy every text of every prompt, long ones included, to the
// heap.
func writeString(w io.Writer, s string, buf []byte) []byte {
	if want := min(len(s), 512); len(buf) < want {
		buf = make([]byte, max(want, 64))
	}
	for len(s) > 0 {
		n := copy(buf, s)
		_, _ = w.Write(buf[:n])
		s = s[n:]
	}
	return buf
}

func parseStreamOptions(raw json.RawMessage) (bool, error) {
	if len(raw) == 0 || isNull(raw) {
		return false, nil
	}
	opts, ok := objectOf(raw)
	if !ok {
		return false, typeErr("stream_options", "an object", raw)
	}
	v, err := boolField(opts, "include_usage")
	if err != nil {
		return false, typeErr("stream_options.include_usage", "a boolean", opts["include_usage"])
	}
	return v, nil
}

// present reports whether a field was sent with a non-null value; OpenAI
// treats an explicit null as "not set" for optional parameters.
func present(fields map[string]json.RawMessage, name string) bool {
	raw, ok := fields[name]
	return ok && !isNull(raw)
}

func stringField(fields map[string]json.RawMessage, name string, required bool) (string, error) {
	raw, ok := fields[name]
	if !ok || isNull(raw) {
		if required {
			return "", missingErr(name)
		}
		return "", nil
	}
	s, ok := asString(raw)
	if !ok {
		return "", typeErr(name, "a string", raw)
	}
	return s, nil
}

func boolField(fields map[string]json.RawMessage, name string) (bool, error) {
	raw, ok := fields[name]
	if !ok || isNull(raw) {
		return false, nil
	}
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, typeErr(name, "a boolean", raw)
}

// checkN accepts only one choice per request. Several choices would need
// their usage and cost summed and their stream chunks told apart, which the
// edge does not do; answering one choice to a request for several would be
// silently wrong, so it is refused.
func checkN(fields map[string]json.RawMessage) error {
	raw, ok := fields["n"]
	if !ok || isNull(raw) {
		return nil
	}
	_, err := integerIn(raw, "n", 1, 1)
	var perr *Error
	if errors.As(err, &perr) && perr.Code == CodeIntegerAboveMax {
		return &Error{Param: "n", Code: CodeUnsupportedValue,
			Message: "Unsupported value: 'n' must be 1: only one choice per request is supported; send several requests instead."}
	}
	return err
}

// MaxTokens is the largest max_tokens (or max_completion_tokens) accepted:
// OpenAI's own bound, a 32-bit integer. Far above any model's output, it
// keeps every sum and price of token counts, here and in the decider,
// finite and exact.
const MaxTokens = 1<<31 - 1

// tokenCountField reads a token count: an integer from 1 to MaxTokens, 0
// when absent.
func tokenCountField(fields map[string]json.RawMessage, name string) (int64, error) {
	raw, ok := fields[name]
	if !ok || isNull(raw) {
		return 0, nil
	}
	return integerIn(raw, name, 1, MaxTokens)
}

// utf8Error is the refusal of a body that is not valid UTF-8, naming the
// top-level field holding the first invalid byte when there is one.
func utf8Error(fields map[string]json.RawMessage) *Error {
	for _, k := range sortedKeys(fields) {
		if k != "" && !utf8.Valid(fields[k]) && utf8.ValidString(k) {
			return &Error{Param: k, Code: CodeInvalidValue, Message: fmt.Sprintf(
				"Invalid value for '%s': it is not valid UTF-8; the request body must be UTF-8 JSON.", k)}
		}
	}
	return &Error{Code: CodeInvalidJSON, Message: "We could not parse the JSON body of your request: it is not valid UTF-8."}
}

// truncateText shortens s to at most n bytes for an error message.
func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}

// String reads raw as a JSON string, without decoding when it holds
// nothing to unescape, as a model name or a short text does.
func String(raw json.RawMessage) (string, bool) { return asString(raw) }

func asString(raw json.RawMessage) (string, bool) { return jsonscan.Unquote(raw) }

// compact returns raw JSON without insignificant whitespace, so the token
// estimate of tools and schemas does not depend on the client's formatting
// (the provider simulator counts the same way).
func compact(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// jsonErrText shortens encoding/json errors to what helps a client, without
// echoing large parts of its body.
func jsonErrText(err error) string {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Sprintf("%s (at byte %d)", syn.Error(), syn.Offset)
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		return fmt.Sprintf("unexpected %s (at byte %d)", typ.Value, typ.Offset)
	}
	return err.Error()
}
