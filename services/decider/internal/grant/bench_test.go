package grant_test

import (
	"testing"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/grant"
)

// BenchmarkIssueVerify is the grant work of one request: the decider
// issues the grant with its decision, then verifies it on the request's
// activity record.
func BenchmarkIssueVerify(b *testing.B) {
	s, err := grant.New(make([]byte, 32))
	if err != nil {
		b.Fatal(err)
	}
	caps := &switchboardv1.DecisionCaps{MaxInputTokens: 200_000, MaxOutputTokens: 8192, MaxCostUsd: 0.5, MaxAttemptsCostUsd: 1.25}
	b.ReportAllocs()
	for b.Loop() {
		g := s.Issue("gen-0123456789abcdef01234567", "acme", "key-0123456789ab", caps)
		if !s.Verify(g, "gen-0123456789abcdef01234567", "acme", "key-0123456789ab", caps) {
			b.Fatal("the grant just issued does not verify")
		}
	}
}
