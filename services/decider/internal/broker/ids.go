package broker

import (
	"crypto/rand"
	"encoding/hex"
)

// Reservation ids. An id names its shard, so Reconcile finds the record
// without a global index, and is otherwise 128 bits from crypto/rand: holding
// one's own reservation ids tells nothing about anyone else's, so an id
// cannot be guessed, only learned from the broker.
//
// The format is "s", the shard in 2 hex digits and 32 random hex digits.
const idLen = 1 + 2 + 32

// newID returns a new reservation id in shard si.
func newID(si int) string {
	const digits = "0123456789abcdef"
	var rnd [16]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails
	var buf [idLen]byte
	buf[0] = 's'
	buf[1], buf[2] = digits[si>>4], digits[si&15]
	hex.Encode(buf[3:], rnd[:])
	return string(buf[:])
}

// shardOf parses the shard out of a reservation id.
func shardOf(id string) (int, bool) {
	if len(id) != idLen || id[0] != 's' {
		return 0, false
	}
	hi, ok1 := unhex(id[1])
	lo, ok2 := unhex(id[2])
	si := hi<<4 | lo
	return si, ok1 && ok2 && si < nShards
}

func unhex(c byte) (int, bool) {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0'), true
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10, true
	}
	return 0, false
}
