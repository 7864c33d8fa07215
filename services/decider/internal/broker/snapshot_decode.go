package broker

import (
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/proto"

	statev1 "github.com/switchboard-ai/switchboard/proto/switchboard/state/v1"
)

type snapBucket struct {
	id          string
	source      Source
	learned     def
	level, prev float64
	last, epoch int64
}

type snapRoute struct {
	endpoint       string
	dynamic        bool
	until          int64
	reason, streak int32
}

type snapCharge struct {
	bucket string
	amount float64
	epoch  int64
}

type snapEntry struct {
	res     Reservation
	expires int64
	charges []snapCharge
}

type snapCorr struct {
	key         corrKey
	in, out, us float64
	n           int64
}

type snapshot struct {
	granted int64 // longest TTL granted, ns
	learn   int64 // the owner's learning mode ends, Unix ns
	buckets []snapBucket
	routes  []snapRoute
	entries []snapEntry
	corr    []snapCorr
	queue   snapQueue
}

// corrupt is the error of a snapshot holding an impossible value.
func corrupt(what string) error { return fmt.Errorf("%w: %s", ErrSnapshotCorrupt, what) }

// finite reports whether every f is neither NaN nor infinite.
func finite(fs ...float64) bool {
	for _, f := range fs {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return false
		}
	}
	return true
}

// decodeSnapshot parses and validates a snapshot without touching the
// broker: a snapshot holding one impossible value is refused whole.
func decodeSnapshot(blob []byte) (*snapshot, error) {
	if len(blob) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrSnapshotVersion)
	}
	var msg statev1.BrokerSnapshot
	if err := proto.Unmarshal(blob, &msg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSnapshotCorrupt, err)
	}
	s := &snapshot{granted: msg.GetGrantedTtlNano(), learn: msg.GetLearningUntilUnixNano()}
	if s.granted < 0 {
		return nil, corrupt("bad granted TTL")
	}
	names := msg.GetBucketIds()
	var err error
	if s.buckets, err = decodeBuckets(msg.GetBuckets(), names); err != nil {
		return nil, err
	}
	for _, pr := range msg.GetRoutes() {
		if pr.GetPauseReason() < 0 || pr.GetPauseReason() > int32(ReasonDeadline) || pr.GetPauseStreak() < 0 {
			return nil, corrupt("bad route pause")
		}
		s.routes = append(s.routes, snapRoute{endpoint: pr.GetEndpointId(), dynamic: pr.GetDynamic(),
			until: pr.GetPausedUntilUnixNano(), reason: pr.GetPauseReason(), streak: pr.GetPauseStreak()})
	}
	s.entries = make([]snapEntry, 0, len(msg.GetReservations()))
	for _, pr := range msg.GetReservations() {
		se, err := decodeEntry(pr, names)
		if err != nil {
			return nil, err
		}
		s.entries = append(s.entries, se)
	}
	for _, pc := range msg.GetCorrections() {
		c := snapCorr{key: corrKey{model: pc.GetModel(), route: pc.GetRoute()},
			in: pc.GetInput(), out: pc.GetOutput(), us: pc.GetUsd(), n: pc.GetCount()}
		if !finite(c.in, c.out, c.us) || !(c.in > 0 && c.out > 0 && c.us > 0) || c.n < 0 {
			return nil, corrupt("bad correction")
		}
		s.corr = append(s.corr, c)
	}
	if s.queue, err = decodeQueue(msg.GetQueue()); err != nil {
		return nil, err
	}
	return s, nil
}

// decodeBuckets reads the bucket states, the first of names in order.
func decodeBuckets(pbs []*statev1.BrokerBucket, names []string) ([]snapBucket, error) {
	if len(pbs) > len(names) {
		return nil, corrupt("more bucket states than buckets")
	}
	out := make([]snapBucket, 0, len(pbs))
	for i, pb := range pbs {
		sb := snapBucket{id: names[i], level: pb.GetLevel(), prev: pb.GetPrev(), last: pb.GetLastUnixNano(), epoch: pb.GetEpoch()}
		switch pb.GetSource() {
		case uint32(SourceConfigured):
			sb.source = SourceConfigured
		case uint32(SourceLearned):
			sb.source = SourceLearned
			d, err := decodeLearned(pb.GetLearned(), sb.id)
			if err != nil {
				return nil, err
			}
			sb.learned = d
		default:
			return nil, corrupt("bad bucket source")
		}
		if !finite(sb.level, sb.prev) {
			return nil, corrupt("non-finite number")
		}
		out = append(out, sb)
	}
	return out, nil
}

// decodeLearned reads the definition of the learned bucket named id.
func decodeLearned(pl *statev1.BrokerLearnedBucket, id string) (def, error) {
	if pl == nil || pl.GetScope() < uint32(ScopeAPIKey) || pl.GetScope() > uint32(ScopeModelRoute) ||
		pl.GetUnit() < uint32(UnitRequests) || pl.GetUnit() >= uint32(UnitConcurrentRequests) ||
		pl.GetWindow() < uint32(WindowSecond) || pl.GetWindow() > uint32(WindowHour) ||
		!finite(pl.GetCapacity()) || !(pl.GetCapacity() > 0) {
		return def{}, corrupt("bad learned bucket")
	}
	d := def{scope: Scope(pl.GetScope()), unit: Unit(pl.GetUnit()), window: Window(pl.GetWindow()),
		rule: RuleTokenBucket, source: SourceLearned, key: pl.GetKey(), capacity: pl.GetCapacity()}
	d.period = int64(d.window.Duration())
	d.id = bucketID(d.scope, d.key, d.unit, d.window, d.rule, d.source)
	if d.id != id {
		return def{}, corrupt("learned bucket id mismatch")
	}
	return d, nil
}

// decodeClass reads a workload class.
func decodeClass(c int32) (WorkloadClass, error) {
	if c < 0 || c > int32(ClassBatch) {
		return 0, corrupt("bad workload class")
	}
	return WorkloadClass(c), nil
}

// decodeIdentity reads who a reservation or a queued request is for.
func decodeIdentity(pi *statev1.BrokerIdentity) (Identity, error) {
	cls, err := decodeClass(pi.GetClass())
	return Identity{TenantID: pi.GetTenantId(), APIKeyID: pi.GetApiKeyId(), App: pi.GetApp(),
		Environment: pi.GetEnvironment(), Partner: pi.GetPartner(), Class: cls}, err
}

// decodeDemand reads a demand, refusing a negative or non-finite one.
func decodeDemand(pd *statev1.BrokerDemand) (Demand, error) {
	d := Demand{InputTokens: pd.GetInputTokens(), OutputTokens: pd.GetOutputTokens(), USD: pd.GetUsd(), Requests: pd.GetRequests()}
	if !finite(d.USD) {
		return Demand{}, corrupt("non-finite number")
	}
	if d.validate() != nil {
		return Demand{}, corrupt("negative demand")
	}
	return d, nil
}

// decodeEntry reads an open reservation, its charges naming buckets by
// their index in names.
func decodeEntry(pr *statev1.BrokerReservation, names []string) (snapEntry, error) {
	var se snapEntry
	res := &se.res
	res.ID, res.RequestID, res.IdempotencyKey = pr.GetId(), pr.GetRequestId(), pr.GetIdempotencyKey()
	res.Model, res.EndpointID = pr.GetModel(), pr.GetEndpointId()
	if _, ok := shardOf(res.ID); !ok {
		return se, corrupt("bad reservation id")
	}
	var err error
	if res.Identity, err = decodeIdentity(pr.GetIdentity()); err != nil {
		return se, err
	}
	if res.Estimate, err = decodeDemand(pr.GetEstimate()); err != nil {
		return se, err
	}
	if res.Demand, err = decodeDemand(pr.GetDemand()); err != nil {
		return se, err
	}
	se.expires = pr.GetExpiresUnixNano()
	res.Created, res.Expires = time.Unix(0, pr.GetCreatedUnixNano()).UTC(), time.Unix(0, se.expires).UTC()
	se.charges = make([]snapCharge, 0, len(pr.GetCharges()))
	for _, pc := range pr.GetCharges() {
		c := snapCharge{amount: pc.GetAmount(), epoch: pc.GetEpoch()}
		if int64(pc.GetBucket()) >= int64(len(names)) || !finite(c.amount) || c.amount < 0 {
			return se, corrupt("bad charge")
		}
		c.bucket = names[pc.GetBucket()]
		se.charges = append(se.charges, c)
	}
	return se, nil
}
