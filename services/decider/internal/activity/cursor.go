package activity

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// A listing's cursor is where it stopped in the one order every replica's
// log keeps a tenant's records in: newest first (by create_time), then by
// id. That order is the same on every replica, so one position serves
// them all: each replica's log, and the merge of all of them, goes on
// after the last record a page returned. A replica that joined since, or
// whose log is read by another replica, needs no position of its own.

// cursorVersion is the first byte of every cursor: a cursor of another
// format is refused, never misread.
const cursorVersion = 1

// Bounds of what a cursor may hold: it comes back from callers.
const (
	maxCursorTenant = 256
	maxCursorID     = 512
)

// Position is a place in a tenant's listing: just after the record of
// time T and id ID.
type Position struct {
	Tenant string
	T      time.Time
	ID     string
}

// PositionOf is the position just after r, in its tenant's listing.
func PositionOf(r *switchboardv1.ActivityRecord) Position {
	return Position{Tenant: r.GetTenantId(), T: r.GetCreateTime().AsTime(), ID: r.GetId()}
}

// Cursor encodes p as the opaque text a listing hands its caller.
func (p Position) Cursor() string {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(p.Tenant)+8+len(p.ID))
	b = append(b, cursorVersion)
	b = binary.AppendUvarint(b, uint64(len(p.Tenant)))
	b = append(b, p.Tenant...)
	b = binary.BigEndian.AppendUint64(b, uint64(p.T.UnixNano()))
	b = append(b, p.ID...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseCursor decodes a cursor of tenant's listing. A cursor that is not
// one Cursor wrote, or that another tenant's listing wrote, is ErrBadCursor.
func ParseCursor(tenant, s string) (Position, error) {
	if len(s) > base64.RawURLEncoding.EncodedLen(1+binary.MaxVarintLen64+maxCursorTenant+8+maxCursorID) {
		return Position{}, ErrBadCursor
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 1 || b[0] != cursorVersion {
		return Position{}, ErrBadCursor
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > maxCursorTenant || uint64(len(b)-k) < n+8 {
		return Position{}, ErrBadCursor
	}
	b = b[k:]
	if string(b[:n]) != tenant {
		return Position{}, ErrBadCursor
	}
	b = b[n:]
	nanos := int64(binary.BigEndian.Uint64(b[:8])) //nolint:gosec // the bits UnixNano wrote, back
	id := b[8:]
	if len(id) > maxCursorID || bytes.IndexByte(id, 0) >= 0 {
		return Position{}, ErrBadCursor
	}
	return Position{Tenant: tenant, T: time.Unix(0, nanos), ID: string(id)}, nil
}

// seek is the first key of the records bucket after p: the key of p's
// record and one zero byte, which sorts just after it.
func (p Position) seek() []byte {
	return append(recordKey(p.Tenant, p.T, p.ID), 0)
}

// orderKey is where r sorts in its tenant's listing, as the store's keys
// sort: newest first, then by id.
func orderKey(r *switchboardv1.ActivityRecord) []byte {
	return recordKey(r.GetTenantId(), r.GetCreateTime().AsTime(), r.GetId())
}
