package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// session is one client's work: a one-off request, or the turns of a
// conversation, each turn sent after the previous one's answer plus a
// think time (or, from a trace, at its recorded time).
type session struct {
	id           int
	model        string
	start        time.Time
	conversation bool
	fixedTimes   bool // turns arrive at turn.at, not after the previous answer
	turns        []turn
	lastProvider string // the provider that answered the previous turn
	// system is the system prompt the conversation shares with others
	// (conversations.shared_system), id 0 for none.
	system sharedPrefix
}

// turn is one request of a session.
type turn struct {
	prompt    int64
	output    int64
	maxTokens int64
	stream    bool
	sort      string
	think     time.Duration // gap after the previous turn's answer
	at        time.Time     // arrival, when fixedTimes
}

// sessions draws the day's sessions from t. The draw depends only on t and
// seed, so every policy replays exactly the same work.
func (t *Traffic) sessions(seed uint64) []*session {
	rng := rand.New(rand.NewPCG(seed, 0x7472616666696300))
	oneOff := int(math.Round(float64(t.Requests) * t.OneOff.Share))
	convTurns := t.Requests - oneOff
	var out []*session
	newTurn := func(prompt int64, stream bool, sort string) turn {
		tr := turn{prompt: prompt, stream: stream, sort: sort}
		o := float64(t.Output.Median) * math.Exp(t.Output.Spread*rng.NormFloat64())
		tr.output = max(1, min(int64(math.Round(o)), int64(t.Output.Max)))
		if rng.Float64() < t.Output.MaxTokensShare {
			tr.maxTokens = int64(t.Output.MaxTokens)
			tr.output = min(tr.output, tr.maxTokens)
		}
		return tr
	}
	userSort := func() string {
		if rng.Float64() < t.UserOptions.Share {
			return t.UserOptions.Sort
		}
		return ""
	}
	total := 0.0
	for _, b := range t.OneOff.Sizes {
		total += b.Share
	}
	for range oneOff {
		x := rng.Float64() * total
		b := t.OneOff.Sizes[len(t.OneOff.Sizes)-1]
		for _, sb := range t.OneOff.Sizes {
			if x < sb.Share {
				b = sb
				break
			}
			x -= sb.Share
		}
		prompt := uniform(rng, int64(b.Min), int64(b.Max))
		s := &session{model: t.Model, start: t.arrival(rng)}
		s.turns = []turn{newTurn(prompt, rng.Float64() < t.StreamShare, userSort())}
		out = append(out, s)
	}
	for convTurns > 0 {
		cv := t.Conversations
		n := min(int(uniform(rng, int64(cv.Turns.Min), int64(cv.Turns.Max))), convTurns)
		convTurns -= n
		first := uniform(rng, int64(cv.FirstPrompt.Min), int64(cv.FirstPrompt.Max))
		last := max(first, uniform(rng, int64(cv.LastPrompt.Min), int64(cv.LastPrompt.Max)))
		s := &session{model: t.Model, start: t.arrival(rng), conversation: true}
		stream, sort := rng.Float64() < t.StreamShare, userSort()
		// Drawn only when configured, so traffic without shared system
		// prompts draws exactly as before.
		if sh := cv.SharedSystem; sh != nil && sh.Share > 0 && rng.Float64() < sh.Share {
			s.system = sharedPrefix{id: 1 + rng.IntN(max(sh.Prompts, 1)), tokens: min(int64(sh.Tokens), first)}
		}
		for i := range n {
			prompt := first
			if n > 1 {
				prompt = first + (last-first)*int64(i)/int64(n-1)
			}
			tr := newTurn(prompt, stream, sort)
			if i > 0 {
				g := float64(cv.ThinkTime.Median) * math.Exp(cv.ThinkTime.Spread*rng.NormFloat64())
				tr.think = min(max(time.Duration(g), cv.ThinkTime.Min.D()), cv.ThinkTime.Max.D())
			}
			s.turns = append(s.turns, tr)
		}
		out = append(out, s)
	}
	slices.SortStableFunc(out, func(a, b *session) int { return a.start.Compare(b.start) })
	for i, s := range out {
		s.id = i
	}
	return out
}

// arrival draws an arrival time from the piecewise-constant rate over the day.
func (t *Traffic) arrival(rng *rand.Rand) time.Time {
	total := 0.0
	for _, w := range t.Arrival {
		total += w
	}
	x := rng.Float64() * total
	slot := time.Duration(t.Duration) / time.Duration(len(t.Arrival))
	for i, w := range t.Arrival {
		if x < w {
			return t.Start.Add(time.Duration(i)*slot + time.Duration(x/w*float64(slot)))
		}
		x -= w
	}
	return t.Start.Add(time.Duration(t.Duration) - 1)
}

func uniform(rng *rand.Rand, lo, hi int64) int64 {
	if hi <= lo {
		return lo
	}
	return lo + rng.Int64N(hi-lo+1)
}
