package reservation

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The decider keys Decide's reservation and the edge every further one with
// these: the form is what both sides rely on, so it is pinned here.
func TestKeys(t *testing.T) {
	require.Equal(t, "gen-1|openai/gpt-4o", Key("gen-1", "openai/gpt-4o"))
	require.Equal(t, "gen-1|openai/gpt-4o|3", KeyAgain("gen-1", "openai/gpt-4o", 3))
	require.NotEqual(t, Key("gen-1", "a"), KeyAgain("gen-1", "a", 1), "a call again gets a reservation of its own")
	require.Negative(t, NoWait, "any negative max_wait answers at once; 0 leaves the wait to the class")
}
