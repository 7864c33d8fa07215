package chatreq

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The checks below refuse what OpenAI's chat completions API refuses, with
// its codes and the JSON path of the field at fault, before anything goes
// upstream: a request a provider would refuse costs a reservation and a
// provider call to learn what the edge can tell from the body, and some
// providers do not refuse it at all (a temperature of -5 or a role
// "wizard" served as if valid). Fields the edge does not know are not
// checked: they pass through as sent.

// Bounds OpenAI sets on the fields checked.
const (
	maxTools         = 128
	maxStop          = 4
	maxTopLogprobs   = 20
	maxToolNameLen   = 64
	maxMetadata      = 16
	maxMetadataKey   = 64
	maxMetadataValue = 512
)

// checkOptions checks the optional top-level fields OpenAI types and
// bounds, other than the ones Parse reads itself (stream, stream_options,
// max_tokens, max_completion_tokens, n, provider).
func checkOptions(fields map[string]json.RawMessage) error {
	for _, c := range []struct {
		name   string
		lo, hi float64
	}{
		{"temperature", 0, 2}, {"top_p", 0, 1}, {"presence_penalty", -2, 2}, {"frequency_penalty", -2, 2},
	} {
		if raw, ok := fields[c.name]; ok && !isNull(raw) {
			if err := numberIn(raw, c.name, c.lo, c.hi); err != nil {
				return err
			}
		}
	}
	if raw, ok := fields["seed"]; ok && !isNull(raw) {
		if _, err := integerIn(raw, "seed", minInt, maxInt); err != nil {
			return err
		}
	}
	if raw, ok := fields["top_logprobs"]; ok && !isNull(raw) {
		if _, err := integerIn(raw, "top_logprobs", 0, maxTopLogprobs); err != nil {
			return err
		}
	}
	for _, name := range []string{"logprobs", "parallel_tool_calls", "store"} {
		if _, err := boolField(fields, name); err != nil {
			return err
		}
	}
	if _, err := stringField(fields, "user", false); err != nil {
		return err
	}
	if raw, ok := fields["stop"]; ok && !isNull(raw) {
		if err := checkStop(raw); err != nil {
			return err
		}
	}
	if raw, ok := fields["logit_bias"]; ok && !isNull(raw) {
		if err := checkLogitBias(raw); err != nil {
			return err
		}
	}
	if raw, ok := fields["metadata"]; ok && !isNull(raw) {
		if err := checkMetadata(raw); err != nil {
			return err
		}
	}
	var tools toolSet
	if raw, ok := fields["tools"]; ok && !isNull(raw) {
		var err error
		if tools, err = checkTools(raw); err != nil {
			return err
		}
	}
	if raw, ok := fields["tool_choice"]; ok && !isNull(raw) {
		if err := checkToolChoice(raw, tools); err != nil {
			return err
		}
	}
	if raw, ok := fields["response_format"]; ok && !isNull(raw) {
		if err := checkResponseFormat(raw); err != nil {
			return err
		}
	}
	return nil
}

const (
	minInt = -1 << 63
	maxInt = 1<<63 - 1
)

// numberIn reads a number in [lo, hi].
func numberIn(raw []byte, param string, lo, hi float64) error {
	text := string(bytes.TrimSpace(raw))
	if !isNumber(text) {
		return typeErr(param, "a decimal", raw)
	}
	f, err := strconv.ParseFloat(text, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		return typeErr(param, "a decimal", raw)
	case f < lo:
		return boundErr(param, false, true, strconv.FormatFloat(lo, 'g', -1, 64), text)
	case f > hi:
		return boundErr(param, false, false, strconv.FormatFloat(hi, 'g', -1, 64), text)
	}
	return nil
}

// integerIn reads an integer in [lo, hi]: a JSON number without fraction
// or exponent, as OpenAI takes integers.
func integerIn(raw []byte, param string, lo, hi int64) (int64, error) {
	text := string(bytes.TrimSpace(raw))
	if !isNumber(text) {
		return 0, typeErr(param, "an integer", raw)
	}
	n, err := strconv.ParseInt(text, 10, 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange) && strings.HasPrefix(text, "-"):
		return 0, boundErr(param, true, true, strconv.FormatInt(lo, 10), text)
	case err != nil && errors.Is(err, strconv.ErrRange):
		return 0, boundErr(param, true, false, strconv.FormatInt(hi, 10), text)
	case err != nil:
		return 0, typeErr(param, "an integer", raw)
	case n < lo:
		return 0, boundErr(param, true, true, strconv.FormatInt(lo, 10), text)
	case n > hi:
		return 0, boundErr(param, true, false, strconv.FormatInt(hi, 10), text)
	}
	return n, nil
}

// isNumber reports whether text, a valid JSON value, is a number.
func isNumber(text string) bool {
	return text != "" && (text[0] == '-' || (text[0] >= '0' && text[0] <= '9'))
}

func checkStop(raw json.RawMessage) error {
	if _, ok := asString(raw); ok {
		return nil
	}
	items, ok := arrayOf(raw)
	if !ok {
		return typeErr("stop", "one of a string or array of strings", raw)
	}
	if len(items) > maxStop {
		return arrayTooLongErr("stop", maxStop, len(items))
	}
	for i, it := range items {
		if _, ok := asString(it); !ok {
			return typeErr(fmt.Sprintf("stop[%d]", i), "a string", it)
		}
	}
	return nil
}

func checkLogitBias(raw json.RawMessage) error {
	obj, ok := objectOf(raw)
	if !ok {
		return typeErr("logit_bias", "an object", raw)
	}
	for _, k := range sortedKeys(obj) {
		if err := numberIn(obj[k], "logit_bias."+k, -100, 100); err != nil {
			return err
		}
	}
	return nil
}

func checkMetadata(raw json.RawMessage) error {
	obj, ok := objectOf(raw)
	if !ok {
		return typeErr("metadata", "an object", raw)
	}
	if len(obj) > maxMetadata {
		return &Error{Param: "metadata", Code: CodeTooManyProperties, Message: fmt.Sprintf(
			"Invalid 'metadata': too many properties. Expected an object with at most %d properties, but got an object with %d properties instead.",
			maxMetadata, len(obj))}
	}
	for _, k := range sortedKeys(obj) {
		param := "metadata." + truncateText(k, maxMetadataKey)
		if len(k) > maxMetadataKey {
			return &Error{Param: param, Code: CodeStringTooLong, Message: fmt.Sprintf(
				"Invalid property name in 'metadata': it is too long. Expected a string with maximum length %d, but got a string with length %d instead.",
				maxMetadataKey, len(k))}
		}
		s, ok := asString(obj[k])
		if !ok {
			return typeErr(param, "a string", obj[k])
		}
		if len(s) > maxMetadataValue {
			return &Error{Param: param, Code: CodeStringTooLong, Message: fmt.Sprintf(
				"Invalid '%s': string too long. Expected a string with maximum length %d, but got a string with length %d instead.",
				param, maxMetadataValue, len(s))}
		}
	}
	return nil
}

// toolSet is the names of the tools a request declares, by tool type.
type toolSet map[string][]string

func checkTools(raw json.RawMessage) (toolSet, error) {
	items, ok := arrayOf(raw)
	if !ok {
		return nil, typeErr("tools", "an array of objects", raw)
	}
	if len(items) > maxTools {
		return nil, arrayTooLongErr("tools", maxTools, len(items))
	}
	set := toolSet{}
	for i, it := range items {
		param := fmt.Sprintf("tools[%d]", i)
		tool, ok := objectOf(it)
		if !ok {
			return nil, typeErr(param, "an object", it)
		}
		typ, err := requiredString(tool, param+".type")
		if err != nil {
			return nil, err
		}
		switch typ {
		case "function", "custom":
		default:
			return nil, enumErr(param+".type", typ, "function", "custom")
		}
		// A function tool is {type, function: {name, description,
		// parameters, strict}}; a custom tool {type, custom: {name,
		// description, format}}.
		def, err := requiredObject(tool, param+"."+typ, typ)
		if err != nil {
			return nil, err
		}
		name, err := toolName(def, param+"."+typ+".name")
		if err != nil {
			return nil, err
		}
		if err := optionalString(def, param+"."+typ, "description"); err != nil {
			return nil, err
		}
		if typ == "function" {
			if err := optionalObject(def, param+".function", "parameters"); err != nil {
				return nil, err
			}
			if err := optionalBool(def, param+".function", "strict"); err != nil {
				return nil, err
			}
		} else if err := optionalObject(def, param+".custom", "format"); err != nil {
			return nil, err
		}
		set[typ] = append(set[typ], name)
	}
	return set, nil
}

// toolName reads the name of a tool or schema: 1 to 64 letters, digits,
// underscores and dashes, as OpenAI requires.
func toolName(obj map[string]json.RawMessage, param string) (string, error) {
	name, err := requiredString(obj, param)
	if err != nil {
		return "", err
	}
	switch {
	case name == "":
		return "", emptyStringErr(param)
	case len(name) > maxToolNameLen:
		return "", &Error{Param: param, Code: CodeStringTooLong, Message: fmt.Sprintf(
			"Invalid '%s': string too long. Expected a string with maximum length %d, but got a string with length %d instead.",
			param, maxToolNameLen, len(name))}
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return "", &Error{Param: param, Code: CodeInvalidValue, Message: fmt.Sprintf(
				"Invalid '%s': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", param)}
		}
	}
	return name, nil
}

func checkToolChoice(raw json.RawMessage, tools toolSet) error {
	if s, ok := asString(raw); ok {
		switch s {
		case "none", "auto", "required":
			return nil
		}
		return enumErr("tool_choice", s, "none", "auto", "required")
	}
	obj, ok := objectOf(raw)
	if !ok {
		return typeErr("tool_choice", "one of 'none', 'auto', or 'required' or an object", raw)
	}
	typ, err := requiredString(obj, "tool_choice.type")
	if err != nil {
		return err
	}
	switch typ {
	case "function", "custom":
		def, err := requiredObject(obj, "tool_choice."+typ, typ)
		if err != nil {
			return err
		}
		param := "tool_choice." + typ + ".name"
		name, err := requiredString(def, param)
		if err != nil {
			return err
		}
		if !slices.Contains(tools[typ], name) {
			return fieldErr(param, "no %s tool named '%s' is declared in 'tools'", typ, truncateText(name, maxToolNameLen))
		}
	case "allowed_tools":
		if _, err := requiredObject(obj, "tool_choice.allowed_tools", "allowed_tools"); err != nil {
			return err
		}
	default:
		return enumErr("tool_choice.type", typ, "function", "custom", "allowed_tools")
	}
	return nil
}

func checkResponseFormat(raw json.RawMessage) error {
	obj, ok := objectOf(raw)
	if !ok {
		return typeErr("response_format", "an object", raw)
	}
	typ, err := requiredString(obj, "response_format.type")
	if err != nil {
		return err
	}
	switch typ {
	case "text", "json_object":
		return nil
	case "json_schema":
	default:
		return enumErr("response_format.type", typ, "json_object", "json_schema", "text")
	}
	const param = "response_format.json_schema"
	js, err := requiredObject(obj, param, "json_schema")
	if err != nil {
		return err
	}
	if _, err := toolName(js, param+".name"); err != nil {
		return err
	}
	if err := optionalString(js, param, "description"); err != nil {
		return err
	}
	if err := optionalObject(js, param, "schema"); err != nil {
		return err
	}
	return optionalBool(js, param, "strict")
}

// requiredString reads obj's member named by param's last element: a
// string, present and not null.
func requiredString(obj map[string]json.RawMessage, param string) (string, error) {
	raw, ok := obj[lastName(param)]
	if !ok || isNull(raw) {
		return "", missingErr(param)
	}
	s, ok := asString(raw)
	if !ok {
		return "", typeErr(param, "a string", raw)
	}
	return s, nil
}

// requiredObject reads obj's member name, an object, present and not null;
// param is its path.
func requiredObject(obj map[string]json.RawMessage, param, name string) (map[string]json.RawMessage, error) {
	raw, ok := obj[name]
	if !ok || isNull(raw) {
		return nil, missingErr(param)
	}
	o, ok := objectOf(raw)
	if !ok {
		return nil, typeErr(param, "an object", raw)
	}
	return o, nil
}

func optionalString(obj map[string]json.RawMessage, parent, name string) error {
	if raw, ok := obj[name]; ok && !isNull(raw) {
		if _, ok := asString(raw); !ok {
			return typeErr(parent+"."+name, "a string", raw)
		}
	}
	return nil
}

func optionalObject(obj map[string]json.RawMessage, parent, name string) error {
	if raw, ok := obj[name]; ok && !isNull(raw) && !isObject(raw) {
		return typeErr(parent+"."+name, "an object", raw)
	}
	return nil
}

func optionalBool(obj map[string]json.RawMessage, parent, name string) error {
	_, err := boolField(obj, name)
	if err != nil {
		return typeErr(parent+"."+name, "a boolean", obj[name])
	}
	return nil
}

// lastName is the last member name of a JSON path ("b" of "a[0].b").
func lastName(param string) string {
	return param[strings.LastIndexByte(param, '.')+1:]
}

// objectOf decodes raw, a valid JSON value, one level deep if it is an
// object.
func objectOf(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	if !isObject(raw) {
		return nil, false
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, false
	}
	return obj, true
}

// arrayOf decodes raw, a valid JSON value, one level deep if it is an
// array.
func arrayOf(raw json.RawMessage) ([]json.RawMessage, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, false
	}
	return items, true
}

// sortedKeys makes the field reported deterministic when several are wrong.
func sortedKeys(obj map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
