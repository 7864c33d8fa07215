package chatreq

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The error codes a refusal carries, OpenAI's own where it has one, so a
// client handling OpenAI's refusals handles the edge's.
const (
	// CodeInvalidJSON is a body that is not a JSON object.
	CodeInvalidJSON = "invalid_json"
	// CodeMissing is a required field absent or null.
	CodeMissing = "missing_required_parameter"
	// CodeInvalidType is a field of the wrong JSON type.
	CodeInvalidType = "invalid_type"
	// CodeInvalidValue is a field of the right type and a wrong value.
	CodeInvalidValue = "invalid_value"
	// CodeUnsupportedValue is a valid value the edge does not serve (n > 1).
	CodeUnsupportedValue = "unsupported_value"
	// CodeEmptyString is an empty string where one is required.
	CodeEmptyString = "empty_string"
	// CodeEmptyArray is an empty array where one element is required.
	CodeEmptyArray = "empty_array"
	// CodeArrayTooLong is an array above its maximum length.
	CodeArrayTooLong = "array_above_max_length"
	// CodeStringTooLong is a string above its maximum length.
	CodeStringTooLong = "string_above_max_length"
	// CodeTooManyProperties is an object with too many members.
	CodeTooManyProperties = "object_above_max_properties"
	// CodeIntegerBelowMin and the three after it are numbers out of range.
	CodeIntegerBelowMin = "integer_below_min_value"
	CodeIntegerAboveMax = "integer_above_max_value"
	CodeDecimalBelowMin = "decimal_below_min_value"
	CodeDecimalAboveMax = "decimal_above_max_value"
)

// fieldErr is a wrong value of a field, in OpenAI's words for the
// failures it has no more specific code for.
func fieldErr(param, format string, args ...any) *Error {
	return &Error{Param: param, Code: CodeInvalidValue,
		Message: fmt.Sprintf("Invalid value for '%s': %s.", param, fmt.Sprintf(format, args...))}
}

func missingErr(param string) *Error {
	return &Error{Param: param, Code: CodeMissing, Message: fmt.Sprintf("Missing required parameter: '%s'.", param)}
}

// typeErr is a field whose JSON type is not the one expected ("a string",
// "an array of objects").
func typeErr(param, expected string, raw []byte) *Error {
	return &Error{Param: param, Code: CodeInvalidType,
		Message: fmt.Sprintf("Invalid type for '%s': expected %s, but got %s instead.", param, expected, jsonKind(raw))}
}

// typeErrOf is typeErr for a value decoded as any.
func typeErrOf(param, expected string, v any) *Error {
	return &Error{Param: param, Code: CodeInvalidType,
		Message: fmt.Sprintf("Invalid type for '%s': expected %s, but got %s instead.", param, expected, kindOf(v))}
}

// enumErr is a string that is none of the supported values.
func enumErr(param, got string, supported ...string) *Error {
	return &Error{Param: param, Code: CodeInvalidValue,
		Message: fmt.Sprintf("Invalid value: '%s'. Supported values are: %s.", truncateText(got, 40), quotedList(supported))}
}

func emptyArrayErr(param string) *Error {
	return &Error{Param: param, Code: CodeEmptyArray, Message: fmt.Sprintf(
		"Invalid '%s': empty array. Expected an array with minimum length 1, but got an empty array instead.", param)}
}

func emptyStringErr(param string) *Error {
	return &Error{Param: param, Code: CodeEmptyString, Message: fmt.Sprintf(
		"Invalid '%s': empty string. Expected a string with minimum length 1, but got an empty string instead.", param)}
}

func arrayTooLongErr(param string, maxLen, n int) *Error {
	return &Error{Param: param, Code: CodeArrayTooLong, Message: fmt.Sprintf(
		"Invalid '%s': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", param, maxLen, n)}
}

// boundErr is a number out of its range: below when below is true, else
// above; integer says which kind of number the field takes.
func boundErr(param string, integer, below bool, bound, got string) *Error {
	kind, code := "decimal", CodeDecimalAboveMax
	switch {
	case integer && below:
		kind, code = "integer", CodeIntegerBelowMin
	case integer:
		kind, code = "integer", CodeIntegerAboveMax
	case below:
		code = CodeDecimalBelowMin
	}
	if below {
		return &Error{Param: param, Code: code, Message: fmt.Sprintf(
			"Invalid '%s': %s below minimum value. Expected a value >= %s, but got %s instead.", param, kind, bound, truncateText(got, 40))}
	}
	return &Error{Param: param, Code: code, Message: fmt.Sprintf(
		"Invalid '%s': %s above maximum value. Expected a value <= %s, but got %s instead.", param, kind, bound, truncateText(got, 40))}
}

// quotedList renders values as OpenAI lists them: 'a', 'b', and 'c'.
func quotedList(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = "'" + v + "'"
	}
	switch len(q) {
	case 1:
		return q[0]
	case 2:
		return q[0] + " and " + q[1]
	}
	return strings.Join(q[:len(q)-1], ", ") + ", and " + q[len(q)-1]
}

// jsonKind names the JSON type of a raw value as OpenAI's errors do.
func jsonKind(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	if _, err := strconv.ParseInt(string(raw), 10, 64); err == nil || !bytes.ContainsAny(raw, ".eE") {
		return "an integer"
	}
	return "a decimal number"
}

// kindOf is jsonKind for a value decoded as any.
func kindOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case float64:
		if x == float64(int64(x)) {
			return "an integer"
		}
		return "a decimal number"
	case json.Number:
		return jsonKind([]byte(x))
	}
	return "a value"
}
