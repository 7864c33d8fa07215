package activity

import (
	"bytes"
	"slices"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Page is one replica's page of a tenant's listing.
type Page struct {
	// Records are in listing order (List's).
	Records []*switchboardv1.ActivityRecord
	// More says the replica's log has more records after them.
	More bool
}

// Merge merges the pages of several replicas' logs, read from the same
// cursor, into the listing's next page of at most limit records: newest
// first, then by id, as each log orders them. A record more than one log
// holds (an edge that sent its batch again to another replica after a
// broken stream) is listed once. next is the cursor after the page's last
// record, empty when no log has more: the pages hold every record up to
// the limit-th, so a record after it is listed by the next page, through
// whichever replica, exactly once.
func Merge(pages []Page, limit int) (records []*switchboardv1.ActivityRecord, next string) {
	type keyed struct {
		key []byte
		r   *switchboardv1.ActivityRecord
	}
	var all []keyed
	more := false
	for _, p := range pages {
		more = more || p.More
		for _, r := range p.Records {
			all = append(all, keyed{orderKey(r), r})
		}
	}
	slices.SortStableFunc(all, func(a, b keyed) int { return bytes.Compare(a.key, b.key) })
	for i, k := range all {
		if i > 0 && bytes.Equal(all[i-1].key, k.key) {
			continue // the same record from another log
		}
		if len(records) == limit {
			more = true
			break
		}
		records = append(records, k.r)
	}
	if more && len(records) > 0 {
		next = PositionOf(records[len(records)-1]).Cursor()
	}
	return records, next
}
