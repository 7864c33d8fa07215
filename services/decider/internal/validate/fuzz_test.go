package validate

import (
	"math"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// FuzzReportItems decodes a call report or an activity record (the first
// byte picks which) as the Report stream would, and checks that whatever
// the validator accepts is bounded by an independent walk over every
// field: strings within MaxValueLen (the grant within MaxGrantLen), lists
// within MaxList, enum values the API defines, numbers finite and not
// negative, token counts within MaxTokens, money within MaxUSD.
func FuzzReportItems(f *testing.F) {
	at := timestamppb.New(timestamppb.Now().AsTime())
	seeds := []proto.Message{
		&switchboardv1.CallReport{RequestId: "r", Model: "m", EndpointId: "p/m", PromptTokens: 100, StartTime: at,
			Ttft: durationpb.New(3e8), Duration: durationpb.New(1e9), Outcome: switchboardv1.Outcome_OUTCOME_OK,
			Usage:            &switchboardv1.Usage{InputTokens: 100, CachedInputTokens: 50, OutputTokens: 10, CostUsd: 0.01},
			RateLimitHeaders: []*switchboardv1.Header{{Name: "retry-after", Value: "5"}}, Prefixes: []*switchboardv1.PromptPrefix{{Tokens: 50}}},
		&switchboardv1.ActivityRecord{Id: "gen-1", CreateTime: at, TenantId: "acme", Model: "m", EndpointId: "p/m", CostUsd: 0.01,
			Usage: &switchboardv1.Usage{InputTokens: 10, OutputTokens: 5}, Grant: make([]byte, 16),
			Caps:     &switchboardv1.DecisionCaps{MaxInputTokens: 200_000, MaxOutputTokens: 8192, MaxCostUsd: 0.5, MaxAttemptsCostUsd: 1},
			Attempts: []*switchboardv1.Attempt{{EndpointId: "p/m", Outcome: switchboardv1.Outcome_OUTCOME_OK, CostUsd: 0.01}},
			Hedge:    &switchboardv1.HedgeInfo{WinnerEndpointId: "p/m", LoserCostUsd: 0.001}},
	}
	for i, m := range seeds {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{byte(i)}, b...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		var m proto.Message
		var check func() error
		if data[0]%2 == 0 {
			r := &switchboardv1.CallReport{}
			m, check = r, func() error { return CallReport(r) }
		} else {
			r := &switchboardv1.ActivityRecord{}
			m, check = r, func() error { return ActivityRecord(r) }
		}
		if proto.Unmarshal(data[1:], m) != nil || check() != nil {
			return
		}
		bounded(t, m.ProtoReflect(), string(m.ProtoReflect().Descriptor().Name()))
	})
}

// bounded fails t for any field of m out of the bounds FuzzReportItems
// states.
func bounded(t *testing.T, m protoreflect.Message, path string) {
	t.Helper()
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		if fd.IsList() {
			l := v.List()
			if l.Len() > MaxList {
				t.Errorf("%s: %d items accepted", p, l.Len())
			}
			for i := range l.Len() {
				value(t, fd, l.Get(i), p)
			}
			return true
		}
		value(t, fd, v, p)
		return true
	})
}

func value(t *testing.T, fd protoreflect.FieldDescriptor, v protoreflect.Value, p string) {
	t.Helper()
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Duration":
			d := v.Message().Interface().(*durationpb.Duration)
			if d.AsDuration() < 0 || !d.IsValid() {
				t.Errorf("%s: duration %v accepted", p, d)
			}
		case "google.protobuf.Timestamp":
			if ts := v.Message().Interface().(*timestamppb.Timestamp); !ts.IsValid() {
				t.Errorf("%s: timestamp %v accepted", p, ts)
			}
		default:
			bounded(t, v.Message(), p)
		}
	case protoreflect.StringKind:
		if len(v.String()) > MaxValueLen {
			t.Errorf("%s: %d bytes accepted", p, len(v.String()))
		}
	case protoreflect.BytesKind:
		if len(v.Bytes()) > MaxGrantLen {
			t.Errorf("%s: %d bytes accepted", p, len(v.Bytes()))
		}
	case protoreflect.EnumKind:
		if fd.Enum().Values().ByNumber(v.Enum()) == nil {
			t.Errorf("%s: enum value %d accepted", p, v.Enum())
		}
	case protoreflect.DoubleKind, protoreflect.FloatKind:
		if x := v.Float(); math.IsNaN(x) || math.IsInf(x, 0) || x < 0 || x > MaxUSD {
			t.Errorf("%s: %v accepted", p, x)
		}
	case protoreflect.Int64Kind, protoreflect.Int32Kind, protoreflect.Sint64Kind, protoreflect.Sint32Kind,
		protoreflect.Sfixed64Kind, protoreflect.Sfixed32Kind:
		if x := v.Int(); x < 0 || x > MaxTokens {
			t.Errorf("%s: %d accepted", p, x)
		}
	}
}
