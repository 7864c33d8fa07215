package chatreq

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// maxLatencySeconds bounds preferred_max_latency so the conversion to a
// time.Duration cannot overflow; a day is already far beyond any useful value.
const maxLatencySeconds = 24 * 60 * 60

// parseProvider turns the `provider` object into routing options. It is strict
// (unknown keys are errors) because a misspelt routing option silently ignored
// would route — and bill — the request differently from what the user asked.
func parseProvider(raw json.RawMessage) (*switchboardv1.ProviderPreferences, error) {
	if isNull(raw) {
		return nil, nil
	}
	if !isObject(raw) {
		return nil, fieldErr("provider", "must be an object")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fieldErr("provider", "must be an object")
	}
	p := &switchboardv1.ProviderPreferences{}
	// Sorted keys make the reported error deterministic when several are wrong.
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		v := fields[key]
		param := "provider." + key
		if isNull(v) {
			if _, known := providerKeys[key]; !known {
				return nil, fieldErr(param, "is not a known routing option")
			}
			continue
		}
		var err error
		switch key {
		case "only":
			p.Only, err = stringList(v, param)
		case "ignore":
			p.Ignore, err = stringList(v, param)
		case "order":
			p.Order, err = stringList(v, param)
		case "quantizations":
			p.Quantizations, err = stringList(v, param)
		case "sort":
			p.Sort, err = parseSort(v, param)
		case "max_price":
			p.MaxPrice, err = parseMaxPrice(v, param)
		case "allow_fallbacks":
			var b bool
			b, err = boolValue(v, param)
			p.AllowFallbacks = &b
		case "require_parameters":
			p.RequireParameters, err = boolValue(v, param)
		case "zdr":
			p.Zdr, err = boolValue(v, param)
		case "data_collection":
			p.DataCollection, err = parseDataCollection(v, param)
		case "preferred_min_throughput":
			var f float64
			f, err = nonNegNumber(v, param)
			p.PreferredMinThroughput = &f
		case "preferred_max_latency":
			var f float64
			if f, err = nonNegNumber(v, param); err == nil {
				if f > maxLatencySeconds {
					err = fieldErr(param, "must be at most %d seconds", maxLatencySeconds)
				} else {
					p.PreferredMaxLatency = durationpb.New(time.Duration(f * float64(time.Second)))
				}
			}
		default:
			err = fieldErr(param, "is not a known routing option")
		}
		if err != nil {
			return nil, err
		}
	}
	return p, nil
}

var providerKeys = map[string]struct{}{
	"only": {}, "ignore": {}, "order": {}, "quantizations": {}, "sort": {},
	"max_price": {}, "allow_fallbacks": {}, "require_parameters": {}, "zdr": {},
	"data_collection": {}, "preferred_min_throughput": {}, "preferred_max_latency": {},
}

func stringList(raw json.RawMessage, param string) ([]string, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fieldErr(param, "must be an array of strings")
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		s, ok := asString(it)
		if !ok || s == "" {
			return nil, fieldErr(param+"["+strconv.Itoa(i)+"]", "must be a non-empty string")
		}
		out = append(out, s)
	}
	return out, nil
}

func parseSort(raw json.RawMessage, param string) (switchboardv1.Sort, error) {
	s, ok := asString(raw)
	if !ok {
		return 0, fieldErr(param, `must be one of "price", "throughput", "latency"`)
	}
	switch s {
	case "price":
		return switchboardv1.Sort_SORT_PRICE, nil
	case "throughput":
		return switchboardv1.Sort_SORT_THROUGHPUT, nil
	case "latency":
		return switchboardv1.Sort_SORT_LATENCY, nil
	}
	return 0, fieldErr(param, `must be one of "price", "throughput", "latency"`)
}

func parseDataCollection(raw json.RawMessage, param string) (switchboardv1.DataCollection, error) {
	s, _ := asString(raw)
	switch s {
	case "allow":
		return switchboardv1.DataCollection_DATA_COLLECTION_ALLOW, nil
	case "deny":
		return switchboardv1.DataCollection_DATA_COLLECTION_DENY, nil
	}
	return 0, fieldErr(param, `must be "allow" or "deny"`)
}

func parseMaxPrice(raw json.RawMessage, param string) (*switchboardv1.MaxPrice, error) {
	if !isObject(raw) {
		return nil, fieldErr(param, "must be an object")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fieldErr(param, "must be an object")
	}
	mp := &switchboardv1.MaxPrice{}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := fields[k]
		sub := param + "." + k
		if k != "prompt" && k != "completion" {
			return nil, fieldErr(sub, "is not a known price cap (use prompt or completion, USD per million tokens)")
		}
		if isNull(v) {
			continue
		}
		f, err := nonNegNumber(v, sub)
		if err != nil {
			return nil, err
		}
		if k == "prompt" {
			mp.Prompt = &f
		} else {
			mp.Completion = &f
		}
	}
	return mp, nil
}

func boolValue(raw json.RawMessage, param string) (bool, error) {
	switch strings.TrimSpace(string(raw)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fieldErr(param, "must be a boolean")
}

func nonNegNumber(raw json.RawMessage, param string) (float64, error) {
	s := strings.TrimSpace(string(raw))
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return 0, fieldErr(param, "must be a non-negative number")
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fieldErr(param, "must be a non-negative number")
	}
	return f, nil
}
