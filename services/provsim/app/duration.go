package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written as a Go duration string ("250ms", "5m")
// in both YAML and JSON, so the config file and the admin API read the same
// and nobody has to count nanoseconds.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String returns the Go duration string of d.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON implements [json.Marshaler].
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.String())
}

// UnmarshalJSON implements [json.Unmarshaler]. A string is parsed with
// time.ParseDuration; a bare number is taken as nanoseconds, which is what
// json.Marshal of a time.Duration produces.
func (d *Duration) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration must be a string such as \"250ms\": %w", err)
	}
	*d = Duration(n)
	return nil
}

// MarshalYAML implements [yaml.Marshaler].
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalYAML implements [yaml.Unmarshaler]. Only duration strings are
// accepted: a bare YAML number is ambiguous (seconds? nanoseconds?) and is
// refused rather than guessed.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: duration must be a string such as \"250ms\"", n.Line)
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}
