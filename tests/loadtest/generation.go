package loadtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// generation is one call as the edge's GET /v1/generation and GET
// /v1/activity write it, read as a client reads it: written out here, not
// borrowed from the edge, so a renamed or retyped field fails the tests
// that read it.
type generation struct {
	ID                       string             `json:"id"`
	CreatedAt                string             `json:"created_at"`
	TenantID                 string             `json:"tenant_id"`
	APIKeyID                 string             `json:"api_key_id"`
	Model                    string             `json:"model"`
	RequestedModel           string             `json:"requested_model"`
	APIType                  string             `json:"api_type"`
	ProviderName             string             `json:"provider_name"`
	EndpointID               string             `json:"endpoint_id"`
	Streamed                 bool               `json:"streamed"`
	Status                   string             `json:"status"`
	HTTPStatus               int32              `json:"http_status"`
	Error                    string             `json:"error"`
	Latency                  *int64             `json:"latency"`
	GenerationTime           int64              `json:"generation_time"`
	NativeTokensPrompt       int64              `json:"native_tokens_prompt"`
	NativeTokensCached       int64              `json:"native_tokens_cached"`
	NativeTokensCacheWrite   int64              `json:"native_tokens_cache_write"`
	NativeTokensCacheWrite1h int64              `json:"native_tokens_cache_write_1h"`
	NativeTokensCompletion   int64              `json:"native_tokens_completion"`
	UsageReported            bool               `json:"usage_reported"`
	TotalCost                float64            `json:"total_cost"`
	CostCapped               bool               `json:"cost_capped"`
	Hedge                    *generationHedge   `json:"hedge"`
	ProviderResponses        []providerResponse `json:"provider_responses"`
}

type generationHedge struct {
	Mode             string  `json:"mode"`
	WinnerEndpointID string  `json:"winner_endpoint_id"`
	LoserEndpointID  string  `json:"loser_endpoint_id"`
	LoserCost        float64 `json:"loser_cost"`
}

type providerResponse struct {
	EndpointID   string  `json:"endpoint_id"`
	ProviderName string  `json:"provider_name"`
	Status       *int32  `json:"status"`
	Outcome      string  `json:"outcome"`
	Latency      *int64  `json:"latency"`
	IsHedge      bool    `json:"is_hedge"`
	Cost         float64 `json:"cost"`
	Error        string  `json:"error"`
	StartedAt    string  `json:"started_at"`
}

// ParseGeneration reads one call of GET /v1/generation (its "data") or GET
// /v1/activity (an element of its "data") back into the activity record
// the edge wrote it from: every field the HTTP API shows (durations to the
// millisecond), none it does not (grant, caps). A field it does not know
// is an error.
func ParseGeneration(raw []byte) (*switchboardv1.ActivityRecord, error) {
	var g generation
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&g); err != nil {
		return nil, fmt.Errorf("generation %s: %w", raw, err)
	}
	var errs []error
	enum := func(dst protoreflect.Enum, name string) protoreflect.EnumNumber {
		n, err := enumNumber(dst.Descriptor(), name)
		if err != nil {
			errs = append(errs, err)
		}
		return n
	}
	r := &switchboardv1.ActivityRecord{
		Id:             g.ID,
		CreateTime:     parseTime(g.CreatedAt, &errs),
		TenantId:       g.TenantID,
		ApiKeyId:       g.APIKeyID,
		Model:          g.Model,
		RequestedModel: g.RequestedModel,
		ClientApi:      switchboardv1.ClientApi(enum(switchboardv1.ClientApi(0), g.APIType)),
		Provider:       g.ProviderName,
		EndpointId:     g.EndpointID,
		Stream:         g.Streamed,
		Status:         switchboardv1.CallStatus(enum(switchboardv1.CallStatus(0), g.Status)),
		HttpStatus:     g.HTTPStatus,
		Error:          g.Error,
		Ttft:           millis(g.Latency),
		Duration:       durationpb.New(time.Duration(g.GenerationTime) * time.Millisecond),
		Usage: &switchboardv1.Usage{
			InputTokens:         g.NativeTokensPrompt,
			CachedInputTokens:   g.NativeTokensCached,
			CacheWriteTokens:    g.NativeTokensCacheWrite,
			CacheWrite_1HTokens: g.NativeTokensCacheWrite1h,
			OutputTokens:        g.NativeTokensCompletion,
			Reported:            g.UsageReported,
			// What the client is billed is the price of its usage.
			CostUsd: g.TotalCost,
		},
		CostUsd:    g.TotalCost,
		CostCapped: g.CostCapped,
	}
	if h := g.Hedge; h != nil {
		r.Hedge = &switchboardv1.HedgeInfo{
			Used:             true,
			Mode:             switchboardv1.HedgeMode(enum(switchboardv1.HedgeMode(0), h.Mode)),
			WinnerEndpointId: h.WinnerEndpointID,
			LoserEndpointId:  h.LoserEndpointID,
			LoserCostUsd:     h.LoserCost,
		}
	}
	for _, p := range g.ProviderResponses {
		a := &switchboardv1.Attempt{
			EndpointId: p.EndpointID,
			Provider:   p.ProviderName,
			Outcome:    switchboardv1.Outcome(enum(switchboardv1.Outcome(0), p.Outcome)),
			Ttft:       millis(p.Latency),
			Hedge:      p.IsHedge,
			CostUsd:    p.Cost,
			Error:      p.Error,
			StartTime:  parseTime(p.StartedAt, &errs),
		}
		if p.Status != nil {
			a.HttpStatus = *p.Status
		}
		r.Attempts = append(r.Attempts, a)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("generation %s: %v", g.ID, errs)
	}
	return r, nil
}

// ParseActivityPage reads one page of GET /v1/activity: its calls and the
// cursor of the next page.
func ParseActivityPage(raw []byte) ([]*switchboardv1.ActivityRecord, string, error) {
	var page struct {
		Object     string            `json:"object"`
		Data       []json.RawMessage `json:"data"`
		NextCursor string            `json:"next_cursor"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		return nil, "", err
	}
	if page.Object != "list" {
		return nil, "", fmt.Errorf("object %q, want list", page.Object)
	}
	recs := make([]*switchboardv1.ActivityRecord, 0, len(page.Data))
	for _, d := range page.Data {
		r, err := ParseGeneration(d)
		if err != nil {
			return nil, "", err
		}
		recs = append(recs, r)
	}
	return recs, page.NextCursor, nil
}

// enumNumber is the value of enum d that switchboardv1.EnumName calls name.
func enumNumber(d protoreflect.EnumDescriptor, name string) (protoreflect.EnumNumber, error) {
	vs := d.Values()
	for i := range vs.Len() {
		n := vs.Get(i).Number()
		if switchboardv1.EnumName(dynamicEnum{d, n}) == name {
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s: no value %q", d.FullName(), name)
}

// dynamicEnum is a value of an enum known by its descriptor.
type dynamicEnum struct {
	d protoreflect.EnumDescriptor
	n protoreflect.EnumNumber
}

func (e dynamicEnum) Descriptor() protoreflect.EnumDescriptor { return e.d }
func (e dynamicEnum) Type() protoreflect.EnumType             { return nil }
func (e dynamicEnum) Number() protoreflect.EnumNumber         { return e.n }

func millis(ms *int64) *durationpb.Duration {
	if ms == nil {
		return nil
	}
	return durationpb.New(time.Duration(*ms) * time.Millisecond)
}

func parseTime(s string, errs *[]error) *timestamppb.Timestamp {
	if s == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		*errs = append(*errs, err)
		return nil
	}
	return timestamppb.New(t)
}
