// Package grant ties the activity records edges send to the decisions the
// deciders made. When a decider answers Decide for a tenant it issues a
// grant: an HMAC-SHA-256 tag, truncated to 128 bits, over the request id,
// the tenant, the api key id and the decision's caps (the most the request
// may be billed and recorded as, caps.go), under a key every replica
// shares. The edge copies the grant and the caps into the request's
// activity record, and a decider stores a record only when the grant
// matches the record's id, tenant, key and caps, and the record's tokens
// and costs are within the caps: a record for a call the deciders never
// decided for that tenant — forged, or from an edge that does not copy
// grants — is dropped, and so is one whose bill the decision never allowed.
//
// The key is made once, by the first replica that starts, and kept in etcd
// (created only if absent, in one transaction); every replica reads it at
// start, never on the request path. It is never logged.
package grant

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"math"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-ai/switchboard/pkg/offline"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// KeyPath is the etcd key holding the shared key.
const KeyPath = "/switchboard/v1/grant/key"

// keySize is the key's length in bytes; Size is a grant's.
const (
	keySize = 32
	Size    = 16
)

// domain separates grants from any other use of an HMAC under the key,
// and this format from the first one, which covered no caps: a grant of
// that format never verifies as one of this.
const domain = "switchboard activity grant v2"

// Signer issues and verifies grants. It is safe for concurrent use.
type Signer struct {
	macs sync.Pool // *mac
}

// mac is an HMAC-SHA-256 under the key with the buffers one tag needs,
// pooled together so a tag costs no allocation of its own.
type mac struct {
	h   hash.Hash
	in  []byte // the tagged message, reused
	sum []byte // the tag, reused
}

// New returns a signer with key, which must be 32 bytes.
func New(key []byte) (*Signer, error) {
	if len(key) != keySize {
		return nil, fmt.Errorf("grant key: %d bytes, want %d", len(key), keySize)
	}
	k := append([]byte(nil), key...)
	s := &Signer{}
	s.macs.New = func() any {
		return &mac{h: hmac.New(sha256.New, k), in: make([]byte, 0, 128), sum: make([]byte, 0, sha256.Size)}
	}
	return s, nil
}

// Load returns the signer of the key stored in etcd, creating the key
// first if no replica has yet: a new random key is written only if the
// etcd key is absent, in the same transaction that otherwise reads the
// stored one, so every replica ends up with the same key.
func Load(ctx context.Context, cli *clientv3.Client) (*Signer, error) {
	key := make([]byte, keySize)
	_, _ = rand.Read(key) // crypto/rand.Read never fails
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(KeyPath), "=", 0)).
		Then(clientv3.OpPut(KeyPath, string(key))).
		Else(clientv3.OpGet(KeyPath)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("grant key: %w", err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) != 1 {
			return nil, errors.New("grant key: stored key vanished")
		}
		key = kvs[0].Value
	}
	return New(key)
}

// LogValue keeps the key out of logs.
func (s *Signer) LogValue() slog.Value { return slog.StringValue("[grant key]") }

// String keeps the key out of formatted output.
func (s *Signer) String() string { return "[grant key]" }

// Issue returns the grant of the decision for requestID, tenant and
// apiKeyID with caps (nil: every cap 0).
func (s *Signer) Issue(requestID, tenant, apiKeyID string, caps *switchboardv1.DecisionCaps) []byte {
	m := s.tag(requestID, tenant, apiKeyID, caps)
	g := append(make([]byte, 0, Size), m.sum[:Size]...)
	s.macs.Put(m)
	return g
}

// Verify reports whether grant is the one issued for requestID, tenant,
// apiKeyID and caps. It takes the same time whatever the grant.
func (s *Signer) Verify(grant []byte, requestID, tenant, apiKeyID string, caps *switchboardv1.DecisionCaps) bool {
	m := s.tag(requestID, tenant, apiKeyID, caps)
	ok := len(grant) == Size && hmac.Equal(grant, m.sum[:Size])
	s.macs.Put(m)
	return ok
}

// maxPooledInput bounds the message buffer a pooled mac keeps.
const maxPooledInput = 1024

// tag computes the tag of requestID, tenant, apiKeyID and caps into the
// sum of a pooled mac, which the caller puts back once it has read it. The
// strings are written in one piece, each after its length, so no two field
// lists write the same bytes; the caps follow, each in 8 bytes (an integer,
// or a float's IEEE 754 bits).
func (s *Signer) tag(requestID, tenant, apiKeyID string, caps *switchboardv1.DecisionCaps) *mac {
	m := s.macs.Get().(*mac)
	in := append(m.in[:0], domain...)
	for _, f := range [...]string{requestID, tenant, apiKeyID} {
		in = binary.AppendUvarint(in, uint64(len(f)))
		in = append(in, f...)
	}
	in = binary.BigEndian.AppendUint64(in, uint64(caps.GetMaxInputTokens()))
	in = binary.BigEndian.AppendUint64(in, uint64(caps.GetMaxOutputTokens()))
	in = binary.BigEndian.AppendUint64(in, math.Float64bits(caps.GetMaxCostUsd()))
	in = binary.BigEndian.AppendUint64(in, math.Float64bits(caps.GetMaxAttemptsCostUsd()))
	m.h.Reset()
	_, _ = m.h.Write(in)
	m.sum = m.h.Sum(m.sum[:0])
	if cap(in) <= maxPooledInput { // an outsized request id is not kept
		m.in = in
	}
	return m
}

// Refused counts the records Filter dropped, by why.
type Refused struct {
	// Ungranted have no grant matching their id, tenant, key and caps.
	Ungranted int
	// OverCaps have a matching grant, but tokens or costs beyond its caps.
	OverCaps int
	// Why is the first over-caps record's reason: the field beyond its
	// cap, never the record's content; nil when none was.
	Why error
}

// Total is every record dropped.
func (r Refused) Total() int { return r.Ungranted + r.OverCaps }

// Filter returns the records whose grant verifies and whose bill is within
// its caps (Within), each with its grant and caps cleared (a stored record
// is shown to its tenant, who has no use for them), and how many it
// dropped, by why. records itself is left as it was.
func (s *Signer) Filter(records []*switchboardv1.ActivityRecord) (kept []*switchboardv1.ActivityRecord, refused Refused) {
	kept = make([]*switchboardv1.ActivityRecord, 0, len(records))
	for _, r := range records {
		id := grantedFor(r)
		if r.GetTenantId() == "" || id == "" || !s.Verify(r.GetGrant(), id, r.GetTenantId(), r.GetApiKeyId(), r.GetCaps()) {
			refused.Ungranted++
			continue
		}
		if err := Within(r, r.GetCaps()); err != nil {
			if refused.OverCaps == 0 {
				refused.Why = err
			}
			refused.OverCaps++
			continue
		}
		r.Grant, r.Caps, r.GrantRequestId = nil, nil, ""
		kept = append(kept, r)
	}
	return kept, refused
}

// grantedFor is the request id r's grant must have been issued for: its
// own, or for a call served offline the earlier request whose decision it
// was served by, when r was made within offline.MaxGrace after it; ""
// when no grant can be r's.
func grantedFor(r *switchboardv1.ActivityRecord) string {
	g := r.GetGrantRequestId()
	switch {
	case g == "":
		return r.GetId()
	case offline.Within(g, r.GetId()):
		return g
	}
	return ""
}
