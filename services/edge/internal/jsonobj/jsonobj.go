// Package jsonobj writes JSON objects from already valid raw values, and JSON
// strings, for the request bodies the edge sends providers, the usage chunks
// it adds and the names it sets in answers.
package jsonobj

import (
	"bytes"
	"encoding/json"
	"slices"
)

// Encode writes a JSON object, keys sorted, copying each raw value as is:
// json.Marshal would validate and compact every value again, which matters
// for request bodies of megabytes.
func Encode(fields map[string]json.RawMessage) []byte {
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
		buf = AppendString(buf, k)
		buf = append(buf, ':')
		buf = append(buf, bytes.TrimSpace(fields[k])...)
	}
	return append(buf, '}')
}

// AppendString appends s as a JSON string, byte for byte as json.Marshal
// writes it (HTML-safe, invalid UTF-8 replaced); a string of printable ASCII
// with nothing to escape, as names and ids are, is copied as it is.
func AppendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
