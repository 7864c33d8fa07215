// Package jsonobj writes JSON objects from already valid raw values, for the
// request bodies the edge sends providers and the usage chunks it adds.
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
		q, _ := json.Marshal(k)
		buf = append(buf, q...)
		buf = append(buf, ':')
		buf = append(buf, bytes.TrimSpace(fields[k])...)
	}
	return append(buf, '}')
}
