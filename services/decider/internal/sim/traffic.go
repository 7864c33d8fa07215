package sim

import (
	"fmt"
	"time"
)

// Traffic describes a day of requests: how many arrive and when, their
// prompt sizes, and which of them are turns of long conversations. The
// format is documented in sim/README.md of the repository.
type Traffic struct {
	// Model is the model every request names. (Required)
	Model string `yaml:"model"`
	// Start is when the day starts, RFC 3339. (Optional) Defaults to 2026-10-28T00:00:00Z.
	Start time.Time `yaml:"start"`
	// Duration is how long requests keep arriving. (Optional) Defaults to 24h.
	Duration Duration `yaml:"duration"`
	// Requests is how many requests arrive in all, one-off and
	// conversation turns together. (Required)
	Requests int `yaml:"requests"`
	// Arrival are relative weights of the arrival rate over equal slices of
	// Duration (24 values: one per hour of a day). (Optional) Defaults to a flat rate.
	Arrival []float64 `yaml:"arrival"`
	// StreamShare is the share of requests that stream. (Optional) Defaults to 0.
	StreamShare float64 `yaml:"stream_share"`
	// Output is the length of answers. (Required)
	Output OutputMix `yaml:"output"`
	// UserOptions is the share of requests that carry their own routing
	// options, and which. (Optional)
	UserOptions UserOptions `yaml:"user_options"`
	// OneOff are single requests. (Optional)
	OneOff OneOff `yaml:"one_off"`
	// Conversations are multi-turn sessions, such as coding agents, whose
	// every turn resends the previous turn's prompt and adds to it. (Optional)
	Conversations *Conversations `yaml:"conversations"`
}

// OutputMix is how long answers are.
type OutputMix struct {
	// Median is the median output in tokens. (Required)
	Median Tokens `yaml:"median"`
	// Spread is the lognormal sigma around it. (Optional) Defaults to 0.
	Spread float64 `yaml:"spread"`
	// Max caps an answer. (Optional) Defaults to 16k.
	Max Tokens `yaml:"max"`
	// MaxTokensShare is the share of requests that set max_tokens. (Optional)
	MaxTokensShare float64 `yaml:"max_tokens_share"`
	// MaxTokens is the max_tokens those requests set; their answers stop there. (Required with MaxTokensShare)
	MaxTokens Tokens `yaml:"max_tokens"`
}

// UserOptions is the share of requests with their own routing options.
type UserOptions struct {
	// Share of requests. (Optional)
	Share float64 `yaml:"share"`
	// Sort they ask for: price, latency or throughput. (Required with Share)
	Sort string `yaml:"sort"`
}

// OneOff are single requests.
type OneOff struct {
	// Share of all requests. (Optional) Defaults to 0; the rest are
	// conversation turns.
	Share float64 `yaml:"share"`
	// Sizes is the mix of prompt sizes. (Required with Share)
	Sizes []SizeBand `yaml:"sizes"`
}

// SizeBand is a share of prompts drawn uniformly between Min and Max tokens.
type SizeBand struct {
	// Share is the band's relative weight. (Required, > 0)
	Share float64 `yaml:"share"`
	// Min tokens. (Required)
	Min Tokens `yaml:"min"`
	// Max tokens. (Required, ≥ Min)
	Max Tokens `yaml:"max"`
}

// Conversations are multi-turn sessions.
type Conversations struct {
	// Turns is the number of turns per session, uniform in [min, max]. (Required)
	Turns Range `yaml:"turns"`
	// FirstPrompt is the first turn's prompt, uniform in [min, max]. (Required)
	FirstPrompt Range `yaml:"first_prompt"`
	// LastPrompt is the last turn's prompt, uniform in [min, max]; turns in
	// between grow evenly. (Required)
	LastPrompt Range `yaml:"last_prompt"`
	// ThinkTime is the gap between the end of a turn's answer and the next
	// turn: lognormal with this median and spread, clamped to [min, max]. (Required)
	ThinkTime ThinkTime `yaml:"think_time"`
	// SharedSystem makes a share of conversations start with one of a few
	// system prompts (with their tool block) that other conversations send
	// too, as every user of one agent does. (Optional) Defaults to none.
	SharedSystem *SharedSystem `yaml:"shared_system"`
}

// SharedSystem is a system prompt many conversations share: a provider that
// read it for one conversation may read it from cache for another.
type SharedSystem struct {
	// Share is the share of conversations that start with a shared system
	// prompt. (Required)
	Share float64 `yaml:"share"`
	// Prompts is how many different shared system prompts there are, each
	// as likely. (Optional) Defaults to 1.
	Prompts int `yaml:"prompts"`
	// Tokens is each shared system prompt's size, at most the
	// conversation's first prompt. (Required)
	Tokens Tokens `yaml:"tokens"`
}

// Range is a uniform integer range.
type Range struct {
	// Min (Required)
	Min Tokens `yaml:"min"`
	// Max (Required, ≥ Min)
	Max Tokens `yaml:"max"`
}

// ThinkTime is a clamped lognormal gap.
type ThinkTime struct {
	// Median gap. (Required)
	Median Duration `yaml:"median"`
	// Spread is the lognormal sigma. (Optional)
	Spread float64 `yaml:"spread"`
	// Min gap. (Optional)
	Min Duration `yaml:"min"`
	// Max gap. (Optional) Defaults to 30m.
	Max Duration `yaml:"max"`
}

// ParseTraffic parses and validates a traffic file, reporting every problem
// at once with its line.
func ParseTraffic(data []byte) (*Traffic, error) {
	var t Traffic
	c, err := decodeYAML("traffic", data, &t)
	if err != nil {
		return nil, err
	}
	if t.Model == "" {
		c.bad("model", "is required")
	}
	if t.Duration < 0 {
		c.bad("duration", "must be positive")
	}
	if t.Requests <= 0 || t.Requests > 10_000_000 {
		c.bad("requests", "must be in [1, 10000000]")
	}
	sum := 0.0
	for i, w := range t.Arrival {
		if !(w >= 0) {
			c.bad(fmt.Sprintf("arrival[%d]", i), "must be a non-negative weight")
		}
		sum += w
	}
	if len(t.Arrival) > 0 && !(sum > 0) {
		c.bad("arrival", "at least one weight must be positive")
	}
	checkShare(c, "stream_share", t.StreamShare)
	if t.Output.Median <= 0 {
		c.bad("output.median", "must be positive")
	}
	if !(t.Output.Spread >= 0 && t.Output.Spread <= 3) {
		c.bad("output.spread", "must be in [0, 3]")
	}
	if t.Output.Max < 0 {
		c.bad("output.max", "must not be negative")
	}
	checkShare(c, "output.max_tokens_share", t.Output.MaxTokensShare)
	if t.Output.MaxTokensShare > 0 && t.Output.MaxTokens <= 0 {
		c.bad("output.max_tokens", "must be positive when max_tokens_share is set")
	}
	checkShare(c, "user_options.share", t.UserOptions.Share)
	if t.UserOptions.Share > 0 {
		if _, ok := sorts[t.UserOptions.Sort]; !ok {
			c.bad("user_options.sort", "must be price, latency or throughput")
		}
	}
	checkShare(c, "one_off.share", t.OneOff.Share)
	if t.OneOff.Share > 0 && len(t.OneOff.Sizes) == 0 {
		c.bad("one_off.sizes", "at least one band is required when one_off.share is set")
	}
	for i, b := range t.OneOff.Sizes {
		p := fmt.Sprintf("one_off.sizes[%d]", i)
		if !(b.Share > 0) {
			c.bad(p+".share", "must be positive")
		}
		if b.Min <= 0 || b.Max < b.Min {
			c.bad(p, "min must be positive and max at least min")
		}
	}
	if t.OneOff.Share < 1 {
		if cv := t.Conversations; cv == nil {
			c.bad("conversations", "is required unless one_off.share is 1")
		} else {
			checkRange(c, "conversations.turns", cv.Turns)
			checkRange(c, "conversations.first_prompt", cv.FirstPrompt)
			checkRange(c, "conversations.last_prompt", cv.LastPrompt)
			if cv.ThinkTime.Median <= 0 {
				c.bad("conversations.think_time.median", "must be positive")
			}
			if cv.ThinkTime.Min < 0 || (cv.ThinkTime.Max != 0 && cv.ThinkTime.Max < cv.ThinkTime.Min) {
				c.bad("conversations.think_time", "min must not be negative and max at least min")
			}
			if !(cv.ThinkTime.Spread >= 0 && cv.ThinkTime.Spread <= 3) {
				c.bad("conversations.think_time.spread", "must be in [0, 3]")
			}
			if sh := cv.SharedSystem; sh != nil {
				checkShare(c, "conversations.shared_system.share", sh.Share)
				if sh.Prompts < 0 || sh.Prompts > 1000 {
					c.bad("conversations.shared_system.prompts", "must be in [0, 1000]")
				}
				if sh.Tokens <= 0 {
					c.bad("conversations.shared_system.tokens", "must be positive")
				}
			}
		}
	}
	if err := c.err(); err != nil {
		return nil, err
	}
	if t.Start.IsZero() {
		t.Start = time.Date(2026, 10, 28, 0, 0, 0, 0, time.UTC)
	}
	if t.Duration == 0 {
		t.Duration = Duration(24 * time.Hour)
	}
	if len(t.Arrival) == 0 {
		t.Arrival = []float64{1}
	}
	if t.Output.Max == 0 {
		t.Output.Max = 16 * 1024
	}
	if cv := t.Conversations; cv != nil && cv.ThinkTime.Max == 0 {
		cv.ThinkTime.Max = Duration(30 * time.Minute)
	}
	return &t, nil
}

func checkRange(c *checker, path string, r Range) {
	if r.Min <= 0 || r.Max < r.Min {
		c.bad(path, "min must be positive and max at least min")
	}
}
