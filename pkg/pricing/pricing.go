// Package pricing is the one price formula of Switchboard: what a usage of
// a model costs at an endpoint's price. Routing estimates a request's cost
// with it, the edge bills the client with it, and the decider accounts
// synthetic probes with it, so the figure a request was routed on, the
// figure it was billed and the figure the operator pays for probes can
// never disagree on how tokens are priced. Which usage is billed to whom,
// under which caps, is the billing policy: pkg/billing.
//
// Prices are USD per million tokens, priced separately for uncached input,
// cached input (tokens the provider reads from its prompt cache), input
// written to the provider's prompt cache (Anthropic-style caching prices a
// 5-minute and a 1-hour write apart) and output.
package pricing

import "math"

// DefaultOutputTokens is the output estimated for a request that sets no
// max_tokens when the model's typical output is not known yet.
const DefaultOutputTokens = 256

// Price is what an endpoint charges, USD per million tokens.
type Price struct {
	// Input is the price of an uncached input token.
	Input float64
	// CachedInput is the price of an input token read from the provider's cache.
	CachedInput float64
	// Output is the price of an output token.
	Output float64
	// CacheWrite is the price of an input token written to the provider's
	// cache for its default (5-minute) lifetime.
	CacheWrite float64
	// CacheWrite1h is the price of an input token written to the
	// provider's cache for an hour.
	CacheWrite1h float64
}

// Usage is a token count of one call: Input counts every prompt token,
// CachedInput those of them read from cache, CacheWrite and CacheWrite1h
// those written to it (for 5 minutes, for an hour).
type Usage struct {
	Input, CachedInput, Output int64
	CacheWrite, CacheWrite1h   int64
}

// Cost is what u costs at p, in USD, rounded by Round: cache reads at
// CachedInput, cache writes at their write prices, the rest of the prompt
// at Input, the output at Output. Negative counts are taken as 0, and the
// cached and written parts as at most what is left of the input (reads
// first, then 5-minute writes, then 1-hour writes), so a provider's
// inconsistent usage never yields a negative or inflated bill.
func Cost(p Price, u Usage) float64 {
	in := max(u.Input, 0)
	cached := min(max(u.CachedInput, 0), in)
	w5 := min(max(u.CacheWrite, 0), in-cached)
	w1h := min(max(u.CacheWrite1h, 0), in-cached-w5)
	out := max(u.Output, 0)
	return Round((float64(in-cached-w5-w1h)*p.Input + float64(cached)*p.CachedInput +
		float64(w5)*p.CacheWrite + float64(w1h)*p.CacheWrite1h + float64(out)*p.Output) / 1e6)
}

// Round rounds a USD amount to 1e-10 USD, far below the price of one token
// at any real price list, which keeps floating-point noise
// (0.0000042000000000000004) out of answers, activity records and
// comparisons between endpoints.
func Round(usd float64) float64 {
	return math.Round(usd*1e10) / 1e10
}

// Request is what is known of a request before it is sent, to estimate its
// cost on one endpoint.
type Request struct {
	// InputTokens is the prompt's estimated size.
	InputTokens int64
	// CachedTokens is how much of the prompt the endpoint is expected to
	// read from its cache.
	CachedTokens int64
	// MaxOutputTokens is the request's max_tokens; 0 when not set.
	MaxOutputTokens int64
	// TypicalOutputTokens is the model's typical output; 0 when unknown.
	TypicalOutputTokens int64
	// CacheBreakpointTokens is the leading part of the prompt the request
	// asks the endpoint to cache (up to its last cache breakpoint), and
	// CacheBreakpoint1hTokens the part of it asked for an hour; 0 when it
	// asks for none, or the endpoint caches on its own.
	CacheBreakpointTokens, CacheBreakpoint1hTokens int64
}

// Writes is what the endpoint is expected to write to its cache for r, by
// lifetime: the parts of the prompt up to the breakpoints that it does not
// hold already (CachedTokens), the 1-hour part first, as the breakpoints
// come in that order.
func (r Request) Writes() (w5m, w1h int64) {
	in := max(r.InputTokens, 0)
	cached := min(max(r.CachedTokens, 0), in)
	hour := min(max(r.CacheBreakpoint1hTokens, 0), in)
	all := max(min(max(r.CacheBreakpointTokens, 0), in), hour)
	return max(all-max(cached, hour), 0), max(hour-cached, 0)
}

// OutputTokens is the output a request is priced for: its max_tokens when
// set, else the model's typical output, else DefaultOutputTokens.
func (r Request) OutputTokens() int64 {
	switch {
	case r.MaxOutputTokens > 0:
		return r.MaxOutputTokens
	case r.TypicalOutputTokens > 0:
		return r.TypicalOutputTokens
	}
	return DefaultOutputTokens
}

// Estimate is what r is expected to cost at p: its uncached input, cached
// input, cache writes (Writes) and output (OutputTokens) priced by Cost.
func Estimate(p Price, r Request) float64 {
	w5m, w1h := r.Writes()
	return Cost(p, Usage{Input: r.InputTokens, CachedInput: r.CachedTokens, Output: r.OutputTokens(), CacheWrite: w5m, CacheWrite1h: w1h})
}
