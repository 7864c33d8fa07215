package rewrite

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	"github.com/switchboard-ai/switchboard/services/edge/internal/jsonobj"
)

// UsageJSON is an OpenAI usage object for u with its cost, for answers whose
// provider sent none.
func UsageJSON(u pricing.Usage, cost float64) json.RawMessage {
	b := make([]byte, 0, 128)
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, u.Input, 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, u.Output, 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, u.Input+u.Output, 10)
	b = append(b, `,"cost":`...)
	b = appendCost(b, cost)
	return append(b, '}')
}

// appendCost writes a USD amount as a plain JSON number (no exponent, which
// some clients parse badly for amounts like 1.6e-05).
func appendCost(b []byte, cost float64) []byte {
	return strconv.AppendFloat(b, cost, 'f', -1, 64)
}

// UsageChunk is the final usage chunk of a stream whose provider sent none:
// usage (a UsageJSON object) in a chunk with no choices, under the
// Rewriter's id (requestID when it keeps the provider's), model and
// provider.
func (rw *Rewriter) UsageChunk(requestID string, usage json.RawMessage) []byte {
	id := rw.ID
	if id == nil {
		id = String(requestID)
	}
	return jsonobj.Encode(map[string]json.RawMessage{
		"id":       id,
		"object":   String("chat.completion.chunk"),
		"created":  json.RawMessage(strconv.FormatInt(time.Now().Unix(), 10)),
		"model":    rw.Model,
		"provider": rw.Provider,
		"choices":  json.RawMessage("[]"),
		"usage":    usage,
	})
}
