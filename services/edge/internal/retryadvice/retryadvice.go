// Package retryadvice decides what an error answer tells the client about
// retrying it, in the headers the official OpenAI and Anthropic SDKs read
// (Go and Node alike): Retry-After (seconds) and retry-after-ms, which they
// prefer, for how long to wait, and x-should-retry, which they obey over
// their own rule of retrying 408, 409, 429 and 5xx answers. Every API the
// edge serves (chat completions, Messages...) sets them here, so one
// request gets the same advice whichever API it came by.
package retryadvice

import (
	"math"
	"net/http"
	"strconv"
	"time"
)

// The headers an error answer's advice is in.
const (
	// HeaderRetryAfter is the wait in whole seconds, rounded up.
	HeaderRetryAfter = "Retry-After"
	// HeaderRetryAfterMs is the wait in whole milliseconds, rounded up:
	// the SDKs read it before Retry-After, so a wait under a second is
	// waited as it is.
	HeaderRetryAfterMs = "Retry-After-Ms"
	// HeaderShouldRetry is "true" or "false" when the edge knows whether
	// an SDK's automatic retry can succeed.
	HeaderShouldRetry = "X-Should-Retry"
)

// MaxWait is the longest wait an SDK is left to retry after on its own.
// The Node SDKs honour a wait under a minute and retry a longer one on
// their own back-off (0.5 to 8 s, refused again each time); anthropic-sdk-go
// waits whatever it is told, holding the call for minutes; openai-go gives
// up above two minutes. A wait of a minute or more is therefore answered
// with x-should-retry: false: the caller decides when to come back.
const MaxWait = time.Minute

// Retryable reports whether the SDKs retry an answer of status when no
// x-should-retry says otherwise: 408, 409, 429 and every 5xx.
func Retryable(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= http.StatusInternalServerError
}

// Set sets h's advice for an error answered with status. wait is how long
// until a retry may be served, 0 when unknown; final says that no retry can
// help whatever the wait: a policy refuses the request, or every endpoint
// the edge tried failed it (those attempts were its retries).
//
// A retry is advised against (x-should-retry: false) when it is final,
// when status is one the SDKs do not retry anyway (a 4xx other than 408,
// 409 and 429: the request itself is at fault), and when the wait is
// MaxWait or more; it is advised (true) when the edge knows the wait; with
// neither, the SDK's own rule and back-off apply. The wait is sent
// whenever it is known, final or not, for a caller that retries by hand.
func Set(h http.Header, status int, wait time.Duration, final bool) {
	if wait > 0 {
		// Rounded up: a client waiting the rounded-down value would come
		// back too early. In floating point, so no wait can overflow.
		h.Set(HeaderRetryAfter, strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
		h.Set(HeaderRetryAfterMs, strconv.FormatInt(int64(math.Ceil(float64(wait)/float64(time.Millisecond))), 10))
	}
	switch {
	case final, !Retryable(status), wait >= MaxWait:
		h.Set(HeaderShouldRetry, "false")
	case wait > 0:
		h.Set(HeaderShouldRetry, "true")
	}
}
