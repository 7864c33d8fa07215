package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/numfmt"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// writeJSON writes m as the API's JSON with its fields' proto names
// (snake_case), indented by two spaces, one value a document.
func writeJSON(w io.Writer, m proto.Message) error {
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return err
	}
	// protojson varies its spacing on purpose; scripts diffing the output
	// want it the same every time.
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err = buf.WriteTo(w)
	return err
}

// writeJSONValue writes v with encoding/json, indented as writeJSON does.
func writeJSONValue(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// name is an enum value as the HTTP API spells it: "under_8k",
// "cheapest_qualifying".
func name(e protoreflect.Enum) string {
	if n := switchboardv1.EnumName(e); n != "" {
		return n
	}
	return fmt.Sprint(e.Number())
}

// bucketLabels are the size buckets as the explanations write them.
var bucketLabels = map[switchboardv1.SizeBucket]string{
	switchboardv1.SizeBucket_SIZE_BUCKET_UNDER_8K:    "<8k",
	switchboardv1.SizeBucket_SIZE_BUCKET_8K_TO_32K:   "8k-32k",
	switchboardv1.SizeBucket_SIZE_BUCKET_32K_TO_128K: "32k-128k",
	switchboardv1.SizeBucket_SIZE_BUCKET_OVER_128K:   ">128k",
}

// bucketLabel is a size bucket's label, "<8k".
func bucketLabel(b switchboardv1.SizeBucket) string {
	if l, ok := bucketLabels[b]; ok {
		return l
	}
	return name(b)
}

// dur writes a duration as people read latencies: "850 ms" under a
// second, "1.25 s" from one, "-" when unknown.
func dur(d *durationpb.Duration) string {
	if d == nil {
		return "-"
	}
	return durOf(d.AsDuration())
}

func durOf(d time.Duration) string {
	switch {
	case d < time.Second:
		return numfmt.Int(d.Round(time.Millisecond).Milliseconds()) + " ms"
	case d < time.Minute:
		return trimFloat(d.Seconds(), 2) + " s"
	}
	return d.Round(time.Second).String()
}

// trimFloat writes v with at most prec decimals, trailing zeros dropped,
// with thousands separators.
func trimFloat(v float64, prec int) string {
	p := math.Pow(10, float64(prec))
	return numfmt.Number(math.Round(v*p) / p)
}

// usd writes a dollar amount with up to 6 decimals, "$0.000315".
func usd(v float64) string { return "$" + trimFloat(v, 6) }

// percent writes a share (0 to 1) as "42.5%".
func percent(v float64) string { return trimFloat(100*v, 1) + "%" }

// optional writes *v with f, "-" when unknown.
func optional(v *float64, f func(float64) string) string {
	if v == nil {
		return "-"
	}
	return f(*v)
}

// clock writes a timestamp as a local wall-clock time and how far away it
// is: "12:04:05 (in 1m30s)", "-" when unset.
func clock(ts *timestamppb.Timestamp, now time.Time) string {
	if ts == nil {
		return "-"
	}
	t := ts.AsTime()
	in := t.Sub(now).Round(time.Second)
	when := "in " + in.String()
	if in < 0 {
		when = (-in).String() + " ago"
	}
	return t.Local().Format(time.TimeOnly) + " (" + when + ")"
}
