// Package replicas keeps the set of the other decider replicas, from etcd:
// the live ones and their addresses (the membership keys each keeps under a
// lease, store.MembersPrefix), and every replica that holds an activity
// log (store.LogsPrefix, written once by each replica and never removed,
// so a log whose replica is gone is known to be out of reach rather than
// forgotten). It follows both with watches, so a read is memory only. It
// also says which live replica owns a piece of work that one replica of each
// region must do for its region (Owns: rendezvous hashing over the live
// replicas of this replica's region, as their membership keys say).
package replicas

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-ai/switchboard/services/decider/internal/store"
)

// Options configure a Set.
type Options struct {
	// Client reads and watches the keys. (Required)
	Client *clientv3.Client
	// Self is this replica's id, which the set leaves out of Live and
	// Logs. (Required)
	Self string
	// Region is this replica's region: Owns shares work among the live
	// replicas of the same region. (Optional) Defaults to "", the region of
	// the replicas that name none.
	Region string
	// Logger logs failed watches. (Required)
	Logger *slog.Logger
}

// Set is the other replicas, as etcd says. It is safe for concurrent use.
type Set struct {
	o Options

	mu      sync.Mutex
	live    map[string]store.Member // id → address, region
	logs    map[string]bool
	changed chan struct{} // closed and replaced on every change
	revs    [2]int64      // the revisions read at, by prefix
}

// prefixes are the keys a Set follows: live replicas, activity logs.
var prefixes = [2]string{store.MembersPrefix, store.LogsPrefix}

// New reads the replicas; Run follows them.
func New(ctx context.Context, o Options) (*Set, error) {
	s := &Set{o: o, live: map[string]store.Member{}, logs: map[string]bool{}, changed: make(chan struct{})}
	for i, prefix := range prefixes {
		rev, err := s.load(ctx, prefix)
		if err != nil {
			return nil, fmt.Errorf("read the replicas: %w", err)
		}
		s.revs[i] = rev
	}
	return s, nil
}

// Run follows the replicas until ctx ends.
func (s *Set) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for i, prefix := range prefixes {
		wg.Go(func() { s.follow(ctx, prefix, s.revs[i]) })
	}
	wg.Wait()
}

// load reads every key under prefix into the set, replacing what it held
// of that prefix, and returns the revision read at.
func (s *Set) load(ctx context.Context, prefix string) (int64, error) {
	get, err := s.o.Client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prefix == store.MembersPrefix {
		clear(s.live)
	} else {
		clear(s.logs)
	}
	for _, kv := range get.Kvs {
		s.put(prefix, string(kv.Key[len(prefix):]), string(kv.Value))
	}
	s.notify()
	return get.Header.Revision, nil
}

// follow applies the changes under prefix after rev until ctx ends; a
// watch that fails (a compaction, etcd out of reach) reads again and
// watches from there.
func (s *Set) follow(ctx context.Context, prefix string, rev int64) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		wch := s.o.Client.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range wch {
			if resp.Err() != nil {
				break
			}
			s.mu.Lock()
			for _, ev := range resp.Events {
				id := string(ev.Kv.Key[len(prefix):])
				if ev.Type == clientv3.EventTypeDelete {
					s.remove(prefix, id)
				} else {
					s.put(prefix, id, string(ev.Kv.Value))
				}
			}
			s.notify()
			s.mu.Unlock()
			rev = resp.Header.Revision
			backoff = 100 * time.Millisecond
		}
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			r, err := s.load(ctx, prefix)
			if err == nil {
				rev = r
				break
			}
			s.o.Logger.Warn("reading the replicas again", "prefix", prefix, "err", err)
		}
	}
}

func (s *Set) put(prefix, id, value string) {
	if id == s.o.Self || id == "" {
		return
	}
	if prefix == store.MembersPrefix {
		m, err := store.DecodeMember([]byte(value))
		if err != nil {
			s.o.Logger.Warn("a membership key left out", "replica", id, "err", err)
			delete(s.live, id)
			return
		}
		s.live[id] = m
	} else {
		s.logs[id] = true
	}
}

func (s *Set) remove(prefix, id string) {
	if prefix == store.MembersPrefix {
		delete(s.live, id)
	} else {
		delete(s.logs, id)
	}
}

// notify wakes whoever waits on Changed. Callers hold mu.
func (s *Set) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Live returns the other live replicas, id → address, and a channel
// closed at the next change.
func (s *Set) Live() (map[string]string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.live))
	for id, m := range s.live {
		out[id] = m.Addr
	}
	return out, s.changed
}

// Logs returns the ids of the other replicas that hold an activity log,
// live or not, sorted.
func (s *Set) Logs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.Collect(maps.Keys(s.logs))
	for id := range s.live {
		if !s.logs[id] {
			ids = append(ids, id) // its log key not seen yet
		}
	}
	slices.Sort(ids)
	return ids
}

// Owns reports whether this replica is the one of the live replicas of its
// region (itself included) that owns key: the one whose hash with key is
// highest, so a replica that comes or goes moves only its own share, and
// every region has an owner of every key.
func (s *Set) Owns(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	best, bestID := score(s.o.Self, key), s.o.Self
	for id, m := range s.live {
		if m.Region != s.o.Region {
			continue
		}
		if h := score(id, key); h > best || h == best && id < bestID {
			best, bestID = h, id
		}
	}
	return bestID == s.o.Self
}

// score is id's weight for key, the same on every replica.
func score(id, key string) uint64 {
	h := sha256.New()
	_, _ = h.Write([]byte(id))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(key))
	return binary.BigEndian.Uint64(h.Sum(nil))
}
