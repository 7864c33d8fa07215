package experiment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
)

// DefinitionKey holds the experiment's definition (an Experiment message):
// one experiment at a time, running or stopped.
const DefinitionKey = "/switchboard/v1/experiment"

// DataPrefix holds the figures: DataPrefix + experiment id + "/" + replica
// + "/" + block index, one key per block each replica counted requests in,
// written only by that replica.
const DataPrefix = "/switchboard/v1/experiment-data/"

// Errors of the admin calls.
var (
	// ErrRunning means an experiment is running already.
	ErrRunning = errors.New("an experiment is running: stop it first")
	// ErrNone means there is no experiment.
	ErrNone = errors.New("no experiment")
	// ErrInvalid wraps a malformed definition.
	ErrInvalid = errors.New("invalid experiment")
)

// Options configure a Manager.
type Options struct {
	// Client is the etcd client. (Required)
	Client *clientv3.Client
	// Replica names this decider; its figures are stored under it, so it
	// must stay the same across restarts. (Optional) Defaults to "decider".
	Replica string
	// Logger (Required)
	Logger *slog.Logger
	// Now is the clock of the admin calls. (Optional) Defaults to time.Now.
	Now func() time.Time
	// SaveInterval is how often this replica's changed figures are written
	// to etcd; a crash loses at most this much. (Optional) Defaults to 30s.
	SaveInterval time.Duration
	// Limits bound the definitions accepted.
	Limits Limits
}

// state is the experiment this replica follows and its figures.
type state struct {
	plan *Plan
	agg  *Aggregate
	rev  int64 // the etcd revision of the definition
}

// Manager runs the switchback experiment on one replica: it follows the
// definition in etcd (so every replica switches arms together), gives
// routing each request's arm, counts the activity records this replica
// stores, saves its figures to etcd, and answers the admin calls.
type Manager struct {
	o   Options
	cur atomic.Pointer[state] // nil: no experiment
	mu  sync.Mutex            // serialises changes of cur and saves
}

// New returns a manager with no experiment until Load.
func New(o Options) *Manager {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.SaveInterval <= 0 {
		o.SaveInterval = 30 * time.Second
	}
	if o.Replica == "" {
		o.Replica = "decider"
	}
	return &Manager{o: o}
}

// Load reads the stored experiment and this replica's saved figures of it,
// and returns the revision to Run from.
func (m *Manager) Load(ctx context.Context) (int64, error) {
	get, err := m.o.Client.Get(ctx, DefinitionKey)
	if err != nil {
		return 0, fmt.Errorf("read experiment: %w", err)
	}
	if len(get.Kvs) == 1 {
		if err := m.apply(ctx, get.Kvs[0].Value, get.Kvs[0].ModRevision); err != nil {
			return get.Header.Revision, err
		}
	}
	return get.Header.Revision, nil
}

// apply follows a stored definition of revision rev: the same experiment
// keeps its figures (a stop), another one starts from this replica's saved
// figures of it, if any. A definition older than the one followed (the
// watch catching up with what Start or Stop applied at once) is skipped.
func (m *Manager) apply(ctx context.Context, data []byte, rev int64) error {
	def := &switchboardv1.Experiment{}
	if err := proto.Unmarshal(data, def); err != nil {
		return fmt.Errorf("stored experiment: %w", err)
	}
	p, err := Parse(def, Limits{MinBlock: time.Nanosecond}) // stored: accepted once already
	if err != nil {
		return fmt.Errorf("stored experiment: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.cur.Load()
	if cur != nil && rev <= cur.rev {
		return nil
	}
	if cur != nil && cur.plan.ID == p.ID {
		cur.agg.SetPlan(p)
		m.cur.Store(&state{plan: p, agg: cur.agg, rev: rev})
		return nil
	}
	agg := NewAggregate(p)
	saved, err := m.readBlocks(ctx, p.ID, m.o.Replica)
	if err != nil {
		m.o.Logger.Warn("experiment figures of this replica not restored", "experiment", p.ID, "err", err)
	} else if err := agg.Restore(saved[m.o.Replica]); err != nil {
		m.o.Logger.Warn("experiment figures of this replica not restored", "experiment", p.ID, "err", err)
	}
	m.cur.Store(&state{plan: p, agg: agg, rev: rev})
	m.o.Logger.Info("following experiment", "experiment", p.ID, "arms", p.Arms, "start", p.Start, "end", p.End)
	return nil
}

// Arm is routing's Options.Arm: the policy of model's request at now.
func (m *Manager) Arm(model string, now time.Time) (routing.Policy, bool) {
	if s := m.cur.Load(); s != nil {
		return s.plan.Arm(model, now)
	}
	return "", false
}

// Observe counts activity records this replica stored for the first time
// (a record an edge sends again is not passed twice).
func (m *Manager) Observe(records []*switchboardv1.ActivityRecord) {
	if s := m.cur.Load(); s != nil {
		s.agg.Add(records)
	}
}

// Run follows the definition from revision rev on and saves the figures
// every SaveInterval, until ctx ends; then it saves them a last time.
func (m *Manager) Run(ctx context.Context, rev int64) {
	var wg sync.WaitGroup
	wg.Go(func() { m.watch(ctx, rev) })
	tick := time.NewTicker(m.o.SaveInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := m.Save(sctx); err != nil {
				m.o.Logger.Warn("saving experiment figures on stop", "err", err)
			}
			return
		case <-tick.C:
			if err := m.Save(ctx); err != nil && ctx.Err() == nil {
				m.o.Logger.Warn("saving experiment figures", "err", err)
			}
		}
	}
}

// watch applies every definition stored after rev until ctx ends.
func (m *Manager) watch(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		wch := m.o.Client.Watch(clientv3.WithRequireLeader(ctx), DefinitionKey, clientv3.WithRev(rev+1))
		for resp := range wch {
			if err := resp.Err(); err != nil {
				m.o.Logger.Warn("experiment watch", "err", err)
				break
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut {
					if err := m.apply(ctx, ev.Kv.Value, ev.Kv.ModRevision); err != nil {
						m.o.Logger.Error("experiment definition ignored", "revision", ev.Kv.ModRevision, "err", err)
					}
				}
				rev = ev.Kv.ModRevision
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// Save writes the blocks whose figures changed since the last save.
func (m *Manager) Save(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.cur.Load()
	if s == nil {
		return nil
	}
	blocks, err := s.agg.Encode(false)
	if err != nil {
		return err
	}
	var failed []int
	var errs []error
	for i, data := range blocks {
		if _, err := m.o.Client.Put(ctx, blockKey(s.plan.ID, m.o.Replica, i), string(data)); err != nil {
			failed = append(failed, i)
			errs = append(errs, err)
		}
	}
	if len(failed) > 0 {
		s.agg.Redirty(failed)
		return fmt.Errorf("save %d experiment blocks: %w", len(failed), errors.Join(errs...))
	}
	return nil
}

func blockKey(id, replica string, block int) string {
	return fmt.Sprintf("%s%s/%s/%08d", DataPrefix, id, replica, block)
}

// readBlocks reads the stored blocks of an experiment, by replica: every
// replica's, or only's alone.
func (m *Manager) readBlocks(ctx context.Context, id, only string) (map[string]map[int][]byte, error) {
	prefix := DataPrefix + id + "/"
	if only != "" {
		prefix += only + "/"
	}
	get, err := m.o.Client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read experiment figures: %w", err)
	}
	out := map[string]map[int][]byte{}
	for _, kv := range get.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), DataPrefix+id+"/")
		replica, idx, ok := strings.Cut(rest, "/")
		n, err := strconv.Atoi(idx)
		if !ok || err != nil || n < 0 {
			continue
		}
		if out[replica] == nil {
			out[replica] = map[int][]byte{}
		}
		out[replica][n] = kv.Value
	}
	return out, nil
}

// Start stores a new experiment, unless one is running. Every replica
// (this one included) follows it from the watch.
func (m *Manager) Start(ctx context.Context, req *switchboardv1.StartExperimentRequest) (*switchboardv1.Experiment, error) {
	now := m.o.Now()
	def := Normalize(req.GetExperiment(), req.GetBlocks(), now)
	p, err := Parse(def, m.o.Limits)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	data, err := proto.Marshal(def)
	if err != nil {
		return nil, err
	}
	get, err := m.o.Client.Get(ctx, DefinitionKey)
	if err != nil {
		return nil, fmt.Errorf("read experiment: %w", err)
	}
	ops := []clientv3.Op{clientv3.OpPut(DefinitionKey, string(data))}
	rev := int64(0)
	if len(get.Kvs) == 1 {
		rev = get.Kvs[0].ModRevision
		old := &switchboardv1.Experiment{}
		if err := proto.Unmarshal(get.Kvs[0].Value, old); err == nil {
			if op, err := Parse(old, Limits{MinBlock: time.Nanosecond}); err == nil && (op.End.IsZero() || now.Before(op.End)) {
				return nil, ErrRunning
			}
		}
		// The previous experiment's figures go with its definition: all of
		// them, so a replica that saved its last blocks just after an
		// earlier start cleared them leaves nothing behind for long.
		ops = append(ops, clientv3.OpDelete(DataPrefix, clientv3.WithPrefix()))
	}
	txn, err := m.o.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(DefinitionKey), "=", rev)).Then(ops...).Commit()
	if err != nil {
		return nil, fmt.Errorf("store experiment: %w", err)
	}
	if !txn.Succeeded {
		return nil, ErrRunning // another operator started one meanwhile
	}
	// Followed here at once, so this replica counts from the first request;
	// the others follow from their watch.
	if err := m.apply(ctx, data, txn.Header.Revision); err != nil {
		return nil, err
	}
	m.o.Logger.Info("experiment started", "experiment", p.ID, "arms", p.Arms, "block", p.Block, "burn_in", p.BurnIn, "models", p.Models())
	return def, nil
}

// Stop stops the running experiment now; a stopped or ended one is
// returned as it is.
func (m *Manager) Stop(ctx context.Context) (*switchboardv1.Experiment, error) {
	for {
		get, err := m.o.Client.Get(ctx, DefinitionKey)
		if err != nil {
			return nil, fmt.Errorf("read experiment: %w", err)
		}
		if len(get.Kvs) == 0 {
			return nil, ErrNone
		}
		def := &switchboardv1.Experiment{}
		if err := proto.Unmarshal(get.Kvs[0].Value, def); err != nil {
			return nil, fmt.Errorf("stored experiment: %w", err)
		}
		if def.GetStopTime() != nil {
			return def, nil
		}
		def.StopTime = timestamppb.New(m.o.Now())
		data, err := proto.Marshal(def)
		if err != nil {
			return nil, err
		}
		txn, err := m.o.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(DefinitionKey), "=", get.Kvs[0].ModRevision)).
			Then(clientv3.OpPut(DefinitionKey, string(data))).Commit()
		if err != nil {
			return nil, fmt.Errorf("store experiment: %w", err)
		}
		if txn.Succeeded {
			if err := m.apply(ctx, data, txn.Header.Revision); err != nil {
				return nil, err
			}
			m.o.Logger.Info("experiment stopped", "experiment", def.GetId())
			return def, nil
		}
	}
}

// Get returns the experiment and its figures, merged over every replica:
// the others' as last saved, this one's as they are now.
func (m *Manager) Get(ctx context.Context) (*switchboardv1.GetExperimentResponse, error) {
	get, err := m.o.Client.Get(ctx, DefinitionKey)
	if err != nil {
		return nil, fmt.Errorf("read experiment: %w", err)
	}
	if len(get.Kvs) == 0 {
		return nil, ErrNone
	}
	def := &switchboardv1.Experiment{}
	if err := proto.Unmarshal(get.Kvs[0].Value, def); err != nil {
		return nil, fmt.Errorf("stored experiment: %w", err)
	}
	p, err := Parse(def, Limits{MinBlock: time.Nanosecond})
	if err != nil {
		return nil, fmt.Errorf("stored experiment: %w", err)
	}
	stored, err := m.readBlocks(ctx, p.ID, "")
	if err != nil {
		return nil, err
	}
	merged := map[int]*block{}
	var replicas []string
	for replica, blocks := range stored {
		if replica == m.o.Replica {
			continue // the live figures below are newer
		}
		dec, err := decodeBlocks(blocks)
		if err != nil {
			return nil, fmt.Errorf("figures of replica %s: %w", replica, err)
		}
		mergeBlocks(merged, dec)
		replicas = append(replicas, replica)
	}
	if s := m.cur.Load(); s != nil && s.plan.ID == p.ID {
		mergeBlocks(merged, s.agg.snapshot())
		replicas = append(replicas, m.o.Replica)
	} else if own := stored[m.o.Replica]; own != nil {
		dec, err := decodeBlocks(own)
		if err != nil {
			return nil, fmt.Errorf("figures of replica %s: %w", m.o.Replica, err)
		}
		mergeBlocks(merged, dec)
		replicas = append(replicas, m.o.Replica)
	}
	slices.Sort(replicas)
	resp := &switchboardv1.GetExperimentResponse{Experiment: def, CurrentBlock: -1, Replicas: replicas}
	resp.Arms, resp.Differences = p.report(merged)
	if s, ok := p.Locate(m.o.Now()); ok {
		resp.CurrentBlock, resp.CurrentArm = int64(s.Block), string(p.Arms[s.Arm])
	}
	return resp, nil
}
