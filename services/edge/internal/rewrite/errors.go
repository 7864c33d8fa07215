package rewrite

import (
	"encoding/json"
	"strings"
)

// ProviderError is the part of an OpenAI error body the edge passes on.
type ProviderError struct {
	Message string
	Type    string
	Code    string
	Param   string
}

// ParseError reads a provider's error body: an OpenAI error object, or the
// {"message": ...} or {"detail": ...} some providers answer, or else the
// body's text as the message.
func ParseError(raw []byte) ProviderError {
	var body struct {
		Error json.RawMessage `json:"error"`
		// Some providers answer {"message": ...} or {"detail": ...}.
		Message string `json:"message"`
		Detail  string `json:"detail"`
	}
	if json.Unmarshal(raw, &body) != nil {
		return ProviderError{Message: strings.TrimSpace(string(raw))}
	}
	var pe ProviderError
	var e struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
		Param   string          `json:"param"`
	}
	if len(body.Error) > 0 && json.Unmarshal(body.Error, &e) == nil {
		pe = ProviderError{Message: e.Message, Type: e.Type, Param: e.Param}
		var s string
		if json.Unmarshal(e.Code, &s) == nil {
			pe.Code = s
		}
	} else if len(body.Error) > 0 {
		var s string
		if json.Unmarshal(body.Error, &s) == nil {
			pe.Message = s
		}
	}
	if pe.Message == "" {
		pe.Message = body.Message
	}
	if pe.Message == "" {
		pe.Message = body.Detail
	}
	return pe
}
