package grant_test

import (
	"testing"

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
	b.ReportAllocs()
	for b.Loop() {
		g := s.Issue("gen-0123456789abcdef01234567", "acme", "key-0123456789ab")
		if !s.Verify(g, "gen-0123456789abcdef01234567", "acme", "key-0123456789ab") {
			b.Fatal("the grant just issued does not verify")
		}
	}
}
