package store

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	statev1 "github.com/switchboard-ai/switchboard/proto/switchboard/state/v1"
)

// Member is a live replica as its membership key says.
type Member struct {
	// Addr is where the other replicas dial it (its --advertise).
	Addr string
	// Region is the region it runs in; "" when it names none.
	Region string
}

// encode is m as its membership key holds it, a protobuf
// switchboard.state.v1.ReplicaMember.
func (m Member) encode() []byte {
	b, _ := proto.Marshal(&statev1.ReplicaMember{Address: m.Addr, Region: m.Region}) // cannot fail on strings
	return b
}

// DecodeMember reads a membership key's value. A value that does not decode,
// or names no address, is refused: a replica that cannot be reached is no
// peer.
func DecodeMember(value []byte) (Member, error) {
	var pm statev1.ReplicaMember
	if err := proto.Unmarshal(value, &pm); err != nil {
		return Member{}, fmt.Errorf("decode a membership key: %w", err)
	}
	if pm.GetAddress() == "" {
		return Member{}, errors.New("a membership key names no address")
	}
	return Member{Addr: pm.GetAddress(), Region: pm.GetRegion()}, nil
}

// Members lists live replicas: id → member. A key that does not decode is
// left out.
func (s *Store) Members(ctx context.Context) (map[string]Member, error) {
	get, err := s.cli.Get(ctx, MembersPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	out := make(map[string]Member, len(get.Kvs))
	for _, kv := range get.Kvs {
		if m, err := DecodeMember(kv.Value); err == nil {
			out[string(kv.Key[len(MembersPrefix):])] = m
		}
	}
	return out, nil
}

// MemberValue is m as a membership key holds it, for tests that write
// membership keys of replicas that do not run.
func MemberValue(m Member) string { return string(m.encode()) }
