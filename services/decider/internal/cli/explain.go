package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/numfmt"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func explainCommand() *command {
	return &command{name: "explain", args: "MODEL", summary: "what the decider would choose for a request, with every endpoint's figures", dial: true,
		about: "Asks the decider what it would do with a request for MODEL (nothing is reserved, explored or recorded)\n" +
			"and prints every endpoint's figures. Routing options are the HTTP API's `provider` object, in its own terms:\n" +
			"--provider '{\"sort\":\"latency\",\"max_price\":{\"prompt\":0.3}}', or --sort and --max-price alone.",
		setup: func(fs *flag.FlagSet) func(context.Context, *run) error {
			prompt := fs.Int64("prompt-tokens", 1000, "the prompt's size in tokens")
			cached := fs.Int64("cached-tokens", 0, "the prompt's cached tokens (0: let the decider estimate)")
			maxOut := fs.Int64("max-tokens", 0, "max_tokens of the request (0: none, priced at the model's typical answer)")
			tenant := fs.String("tenant", "", "the tenant the request is for")
			key := fs.String("api-key", "", "the client's API key, resolved as the edge would (instead of --tenant)")
			stream := fs.Bool("stream", false, "a streamed request")
			session := fs.String("session-id", "", "a conversation's session id (X-Session-Id): shows whether its next turn stays on its endpoint")
			provider := fs.String("provider", "", `routing options as the HTTP API's "provider" object (JSON)`)
			sort := fs.String("sort", "", "provider.sort: price, throughput or latency")
			maxPrice := fs.String("max-price", "", "provider.max_price in USD per million tokens: prompt=0.3,completion=1")
			return func(ctx context.Context, r *run) error {
				if err := r.positional(1, 1); err != nil {
					return err
				}
				prefs, err := ParseProvider(*provider, *sort, *maxPrice)
				if err != nil {
					return usageError{err.Error()}
				}
				req := &switchboardv1.ExplainRequest{
					Model: r.args[0], Stream: *stream, SessionId: *session, Provider: prefs,
					Identity: &switchboardv1.Identity{TenantId: *tenant},
					Tokens:   &switchboardv1.TokenEstimate{InputTokens: *prompt, CachedInputTokens: *cached, MaxOutputTokens: *maxOut},
				}
				switch {
				case *key != "" && *tenant != "":
					return usagef("--tenant and --api-key exclude each other: the key names its tenant")
				case *key != "":
					req.Identity = &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(*key)}
				case *tenant == "":
					return usagef("name who the request is for: --tenant ID or --api-key KEY (make run's tenant is demo)")
				}
				resp, err := once(ctx, r, func(ctx context.Context, c switchboardv1.DeciderClient) (*switchboardv1.ExplainResponse, error) {
					return c.Explain(ctx, req)
				})
				if err != nil {
					return err
				}
				if r.json() {
					return writeJSON(r.env.Stdout, resp)
				}
				PrintExplanation(r.env.Stdout, req, resp)
				return nil
			}
		}}
}

// httpProvider is the HTTP API's `provider` object (docs/api.md), decoded
// strictly: a misspelt option is an error, not a different route.
type httpProvider struct {
	Only                   []string  `json:"only"`
	Ignore                 []string  `json:"ignore"`
	Order                  []string  `json:"order"`
	Quantizations          []string  `json:"quantizations"`
	Sort                   string    `json:"sort"`
	MaxPrice               *maxPrice `json:"max_price"`
	AllowFallbacks         *bool     `json:"allow_fallbacks"`
	RequireParameters      bool      `json:"require_parameters"`
	DataCollection         string    `json:"data_collection"`
	ZDR                    bool      `json:"zdr"`
	PreferredMinThroughput *float64  `json:"preferred_min_throughput"`
	PreferredMaxLatency    *float64  `json:"preferred_max_latency"` // seconds
}

type maxPrice struct {
	Prompt     *float64 `json:"prompt"`
	Completion *float64 `json:"completion"`
}

// ParseProvider builds the routing options from raw, the HTTP API's
// `provider` object as JSON, then sort and maxPrice ("prompt=0.3,
// completion=1") over it; nil when none is given.
func ParseProvider(raw, sort, maxPriceFlag string) (*switchboardv1.ProviderPreferences, error) {
	var hp httpProvider
	if raw != "" {
		dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&hp); err != nil {
			return nil, fmt.Errorf("--provider: %w (the HTTP API's provider object, e.g. '{\"sort\":\"latency\"}')", err)
		}
	}
	if sort != "" {
		hp.Sort = sort
	}
	if maxPriceFlag != "" {
		if hp.MaxPrice == nil {
			hp.MaxPrice = &maxPrice{}
		}
		for _, kv := range strings.Split(maxPriceFlag, ",") {
			k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 {
				return nil, fmt.Errorf("--max-price %q: write prompt=USD,completion=USD (per million tokens), e.g. prompt=0.3", maxPriceFlag)
			}
			switch k {
			case "prompt":
				hp.MaxPrice.Prompt = &f
			case "completion":
				hp.MaxPrice.Completion = &f
			default:
				return nil, fmt.Errorf("--max-price %q: the prices are prompt and completion", maxPriceFlag)
			}
		}
	}
	if raw == "" && sort == "" && maxPriceFlag == "" {
		return nil, nil
	}
	p := &switchboardv1.ProviderPreferences{Only: hp.Only, Ignore: hp.Ignore, Order: hp.Order, Quantizations: hp.Quantizations,
		AllowFallbacks: hp.AllowFallbacks, RequireParameters: hp.RequireParameters, Zdr: hp.ZDR, PreferredMinThroughput: hp.PreferredMinThroughput}
	if hp.Sort != "" {
		v, ok := enumByName[switchboardv1.Sort](switchboardv1.Sort_name, hp.Sort)
		if !ok {
			return nil, fmt.Errorf("sort %q: use price, throughput or latency", hp.Sort)
		}
		p.Sort = v
	}
	if hp.DataCollection != "" {
		v, ok := enumByName[switchboardv1.DataCollection](switchboardv1.DataCollection_name, hp.DataCollection)
		if !ok {
			return nil, fmt.Errorf("data_collection %q: use allow or deny", hp.DataCollection)
		}
		p.DataCollection = v
	}
	if mp := hp.MaxPrice; mp != nil {
		p.MaxPrice = &switchboardv1.MaxPrice{Prompt: mp.Prompt, Completion: mp.Completion}
	}
	if l := hp.PreferredMaxLatency; l != nil {
		p.PreferredMaxLatency = durationpb.New(time.Duration(*l * float64(time.Second)))
	}
	return p, nil
}

// enumByName is the value of E, other than its zero, the HTTP API names
// s ("latency" is SORT_LATENCY); names is the enum's generated name map.
func enumByName[E interface {
	~int32
	protoreflect.Enum
}](names map[int32]string, s string) (E, bool) {
	for n := range names {
		if v := E(n); n != 0 && name(v) == s {
			return v, true
		}
	}
	var zero E
	return zero, false
}

// PrintExplanation writes an explained decision for req: its reason and
// summary, a row per candidate, the order, the hedge and the price cap.
func PrintExplanation(w io.Writer, req *switchboardv1.ExplainRequest, resp *switchboardv1.ExplainResponse) {
	d := resp.GetDecision()
	in := req.GetTokens().GetInputTokens()
	fmt.Fprintf(w, "%s for tenant %s, a %s-token prompt (%s): %s\n%s\n\n", resp.GetModel(), resp.GetIdentity().GetTenantId(),
		numfmt.Int(in), tokens.BucketOf(in), name(d.GetReason()), d.GetSummary())
	tw := table(w)
	row(tw, "PROVIDER", "QUALIFIED", "TTFT", "SAMPLES", "TOKENS/S", "CACHED TOKENS", "COST", "NOTE")
	for _, c := range d.GetCandidates() {
		tps := "-"
		if c.GetThroughput() > 0 {
			tps = trimFloat(c.GetThroughput(), 1)
		}
		qualified := "no"
		if c.GetQualified() {
			qualified = "yes"
		}
		row(tw, c.GetProvider(), qualified, dur(c.GetTypicalTtft()), numfmt.Int(c.GetSamples()), tps,
			numfmt.Int(c.GetEstimatedCachedTokens()), usd(c.GetCostUsd()), c.GetNote())
	}
	_ = tw.Flush()
	order := []string{resp.GetEndpoint().GetProvider()}
	for _, f := range resp.GetFallbacks() {
		order = append(order, f.GetProvider())
	}
	fmt.Fprintf(w, "\norder: %s\n", strings.Join(order, " → "))
	switch h := resp.GetHedge(); h.GetMode() {
	case switchboardv1.HedgeMode_HEDGE_MODE_DELAYED:
		fmt.Fprintf(w, "hedge: on %s after %s without a first token\n", h.GetEndpoint().GetProvider(), dur(h.GetDelay()))
	case switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE:
		fmt.Fprintf(w, "hedge: on %s at once\n", h.GetEndpoint().GetProvider())
	default:
		fmt.Fprintln(w, "hedge: none")
	}
	if mp := resp.GetMaxPrice(); mp != nil && (mp.Prompt != nil || mp.Completion != nil) {
		var caps []string
		if mp.Prompt != nil {
			caps = append(caps, "prompt "+usd(mp.GetPrompt()))
		}
		if mp.Completion != nil {
			caps = append(caps, "completion "+usd(mp.GetCompletion()))
		}
		fmt.Fprintf(w, "max price: %s per million tokens\n", strings.Join(caps, ", "))
	}
}
