package sim

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// FieldError is one problem in an input file, located by line and field path.
type FieldError struct {
	// File names the input (profile, traffic or trace).
	File string
	// Line is the 1-based line of the offending field, 0 if unknown.
	Line int
	// Field is the field's path, e.g. providers[1].ttft.spread.
	Field string
	// Msg says what is wrong.
	Msg string
}

// Error implements [error.Error].
func (e *FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s: line %d: %s: %s", e.File, e.Line, e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.File, e.Field, e.Msg)
}

// checker collects every problem of one file, so a user sees them all at once.
type checker struct {
	file  string
	lines map[string]int
	errs  []error
}

// bad records a problem with the field at path.
func (c *checker) bad(path, format string, args ...any) {
	c.errs = append(c.errs, &FieldError{File: c.file, Line: c.line(path), Field: path, Msg: fmt.Sprintf(format, args...)})
}

// line returns the line of path, or of its nearest recorded parent.
func (c *checker) line(path string) int {
	for path != "" {
		if l, ok := c.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

func (c *checker) err() error { return errors.Join(c.errs...) }

// decodeYAML decodes data into v, refusing unknown fields, and returns a
// checker that knows the line of every field path for validation errors.
func decodeYAML(file string, data []byte, v any) (*checker, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(root.Content) == 0 {
		return nil, &FieldError{File: file, Field: file, Msg: "is empty"}
	}
	c := &checker{file: file, lines: map[string]int{}}
	walkLines(root.Content[0], "", c.lines)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return c, nil
}

func walkLines(n *yaml.Node, path string, lines map[string]int) {
	if path != "" {
		lines[path] = n.Line
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			child := k.Value
			if path != "" {
				child = path + "." + k.Value
			}
			lines[child] = k.Line
			walkLines(n.Content[i+1], child, lines)
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			walkLines(e, fmt.Sprintf("%s[%d]", path, i), lines)
		}
	}
}

// Duration is a time span written as Go writes durations: "1.5s", "250ms", "5m", "1h30m".
type Duration time.Duration

// UnmarshalYAML implements [yaml.Unmarshaler].
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (write e.g. 1.5s, 250ms, 5m)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// D returns the duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Tokens is a token count: a whole number, or with a k suffix for 1024
// tokens, as the product counts prompt sizes ("60k" is 61,440).
type Tokens int64

// UnmarshalYAML implements [yaml.Unmarshaler].
func (t *Tokens) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseTokens(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*t = Tokens(v)
	return nil
}

// UnmarshalJSON reads a token count from a trace: a number or a string as in YAML.
func (t *Tokens) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := parseTokens(s)
	if err != nil {
		return err
	}
	*t = Tokens(v)
	return nil
}

func parseTokens(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := 1.0
	if rest, ok := strings.CutSuffix(s, "k"); ok {
		s, mult = rest, 1024
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f*mult > math.MaxInt32 || f*mult < math.MinInt32 {
		return 0, fmt.Errorf("%q is not a token count (write e.g. 31, 105000 or 60k)", s)
	}
	return int64(math.Round(f * mult)), nil
}

// ClockTime is a time of day, "hh:mm" or "hh:mm:ss" in UTC, stored as the offset from midnight.
type ClockTime time.Duration

// UnmarshalYAML implements [yaml.Unmarshaler].
func (c *ClockTime) UnmarshalYAML(n *yaml.Node) error {
	t, err := time.Parse("15:04", n.Value)
	if err != nil {
		t, err = time.Parse("15:04:05", n.Value)
	}
	if err != nil {
		return fmt.Errorf("line %d: %q is not a time of day (write hh:mm or hh:mm:ss, e.g. 14:30)", n.Line, n.Value)
	}
	*c = ClockTime(time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute + time.Duration(t.Second())*time.Second)
	return nil
}
