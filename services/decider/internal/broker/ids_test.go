package broker

import (
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// r2id is id with its random part changed: the same shard, another id.
func r2id(id string) string {
	last := id[len(id)-1]
	c := byte('0')
	if last == '0' {
		c = '1'
	}
	return id[:len(id)-1] + string(c)
}

// TestReservationIDsAreUnguessable: ids name their shard and are otherwise
// random, so no id says anything about another, of this broker or another.
func TestReservationIDsAreUnguessable(t *testing.T) {
	a, _ := newBroker(t, nil)
	b, _ := newBroker(t, nil)
	seen := map[string]bool{}
	randomParts := map[string]bool{}
	const n = 200
	for i := range 2 * n {
		br := a
		if i%2 == 1 {
			br = b
		}
		r, ref, err := br.Reserve(t.Context(), req(Demand{InputTokens: 1}))
		require.NoError(t, err)
		require.Nil(t, ref)
		require.Len(t, r.ID, idLen)
		require.False(t, seen[r.ID], "unique")
		seen[r.ID] = true
		si, ok := shardOf(r.ID)
		require.True(t, ok)
		require.Equal(t, i/2%nShards, (si+nShards-1)%nShards, "spread over the shards in turn")
		raw, err := hex.DecodeString(r.ID[3:])
		require.NoError(t, err)
		require.Len(t, raw, 16, "128 random bits")
		randomParts[r.ID[3:11]] = true
	}
	// 400 draws of 32 random bits: a repeat is a bug, not bad luck.
	require.Len(t, randomParts, 2*n, "no shared prefix or counter")
	// Reconciling the neighbour of an id finds nothing.
	r, _, err := a.Reserve(t.Context(), req(Demand{InputTokens: 1}))
	require.NoError(t, err)
	_, err = a.Reconcile(t.Context(), ReconcileRequest{ReservationID: r2id(r.ID)})
	require.ErrorIs(t, err, ErrNotFound)
	_, err = a.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID})
	require.NoError(t, err)
}

// oldID is the reservation in testdata/snapshot-sequential-ids.hex, a
// snapshot of a format that never shipped (version 2, ids sequential): one open
// reservation of 100 input, 200 output tokens, 0.5 USD and one request for
// who, taken at t0 for 10 minutes, with a fixed prefix and sequence.
const oldID = "r0123456789ab010000000000000001"

func oldSnapshot(t *testing.T) []byte {
	t.Helper()
	h, err := os.ReadFile("testdata/snapshot-sequential-ids.hex")
	require.NoError(t, err)
	blob, err := hex.DecodeString(strings.TrimSpace(string(h)))
	require.NoError(t, err)
	return blob
}

// TestOldFormatRefused: a snapshot of a format that never shipped (version
// 2, with sequential reservation ids) is refused whole and restores
// nothing, and a sequential id is no reservation's.
func TestOldFormatRefused(t *testing.T) {
	const partnerCC = "partner:resell:concurrent_requests"
	b, c := newBroker(t, snapshotSpecs())
	full := level(t, b, partnerCC)
	require.ErrorIs(t, b.Restore(oldSnapshot(t), c.Now()), ErrSnapshotVersion)
	require.Equal(t, 0, b.Open())
	require.Equal(t, full, level(t, b, partnerCC), "nothing held")
	_, ok := shardOf(oldID)
	require.False(t, ok)
	_, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: oldID, Allow: only(tenant), Outcome: OutcomeOK})
	require.ErrorIs(t, err, ErrNotFound)
}

// only allows one tenant.
func only(tenant string) Allow { return func(t string) bool { return t == tenant } }

// TestReservationsCheckedAgainstTheirTenant: a caller allowed other tenants
// only can neither reconcile nor extend a reservation, open or closed; the
// reservation is left as it was, and its own tenant still closes it.
func TestReservationsCheckedAgainstTheirTenant(t *testing.T) {
	const partnerCC = "partner:resell:concurrent_requests"
	b, c := newBroker(t, hierarchy())
	full := level(t, b, partnerCC)
	r, _, err := b.Reserve(t.Context(), req(one))
	require.NoError(t, err)
	other, _, err := b.Reserve(t.Context(), req(one))
	require.NoError(t, err)
	expires := r.Expires

	_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Allow: only("globex"), Outcome: OutcomeOK})
	require.ErrorIs(t, err, ErrForbidden)
	require.NotErrorIs(t, err, ErrNotFound)
	require.Equal(t, full-2, level(t, b, partnerCC), "untouched")

	c.Advance(time.Minute)
	n, err := b.Extend(t.Context(), []string{other.ID, r.ID}, only("globex"))
	require.ErrorIs(t, err, ErrForbidden)
	require.Zero(t, n, "all or nothing")
	c.Advance(70 * time.Second) // past the TTL of both unless extended
	require.Equal(t, 2, b.Expire(c.Now()), "neither was extended")
	require.Equal(t, full, level(t, b, partnerCC))

	// Closed ones too: an expired reservation's late reconciliation, and a
	// reconciled one.
	_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Allow: only("globex")})
	require.ErrorIs(t, err, ErrForbidden)
	st, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Allow: only(tenant), Outcome: OutcomeOK})
	require.NoError(t, err)
	require.True(t, st.Late)
	require.True(t, st.Reservation.Expires.Equal(expires))
	_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Allow: only("globex")})
	require.ErrorIs(t, err, ErrForbidden)
	_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Allow: only(tenant)})
	require.ErrorIs(t, err, ErrAlreadyReconciled)

	// Its own tenant, and a nil Allow, may.
	r3, _, err := b.Reserve(t.Context(), req(one))
	require.NoError(t, err)
	n, err = b.Extend(t.Context(), []string{r3.ID, "nope"}, only(tenant))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r3.ID, Outcome: OutcomeOK})
	require.NoError(t, err)
}
