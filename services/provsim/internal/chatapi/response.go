package chatapi

// Completion is a non-streamed reply, object "chat.completion".
type Completion struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []Choice `json:"choices"`
	Usage   *Usage   `json:"usage,omitempty"`
}

// Choice is one alternative of a reply. The simulator always sends exactly one.
type Choice struct {
	Index int `json:"index"`
	// Message is set on a non-streamed reply.
	Message *Message `json:"message,omitempty"`
	// Delta is set on a stream chunk; an empty delta marshals as {}.
	Delta *Delta `json:"delta,omitempty"`
	// FinishReason is null until the choice is finished, as OpenAI sends it.
	FinishReason *string `json:"finish_reason"`
	// Logprobs is always null: the simulator has none.
	Logprobs *struct{} `json:"logprobs"`
}

// Message is the assistant's message in a non-streamed reply.
type Message struct {
	Role      string     `json:"role"`
	Content   string     `json:"content"`
	Refusal   *string    `json:"refusal"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// ToolCall is a call of one of the client's tools, whole in a reply or a
// piece of it in a stream chunk.
type ToolCall struct {
	// Index is the call's position, set in stream chunks only.
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function ToolFunction `json:"function"`
}

// ToolFunction names the tool called and carries its arguments (a JSON
// object as a string, or the next piece of it in a stream chunk).
type ToolFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// Delta is the increment a stream chunk carries.
type Delta struct {
	Role      string     `json:"role,omitempty"`
	Content   *string    `json:"content,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// Usage is the token accounting of a reply.
type Usage struct {
	PromptTokens        int64         `json:"prompt_tokens"`
	CompletionTokens    int64         `json:"completion_tokens"`
	TotalTokens         int64         `json:"total_tokens"`
	PromptTokensDetails PromptDetails `json:"prompt_tokens_details"`
}

// PromptDetails splits the prompt tokens; only the cached part is simulated.
type PromptDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// Chunk is one streamed event, object "chat.completion.chunk". The final usage
// chunk has an empty, non-null choices array, which is what SDKs check for.
type Chunk struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []Choice `json:"choices"`
	Usage   *Usage   `json:"usage,omitempty"`
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string      `json:"object"`
	Data   []ModelInfo `json:"data"`
}

// ModelInfo is one entry of ModelList.
type ModelInfo struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ErrorBody is OpenAI's error envelope, the only error shape clients of an
// OpenAI-compatible upstream know how to classify.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of ErrorBody. Param is always null here; Code is
// null when there is no machine-readable code.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// NewError builds an ErrorBody; an empty code is sent as null.
func NewError(message, typ, code string) ErrorBody {
	d := ErrorDetail{Message: message, Type: typ}
	if code != "" {
		d.Code = &code
	}
	return ErrorBody{Error: d}
}
