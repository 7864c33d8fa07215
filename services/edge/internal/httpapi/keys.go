package httpapi

import (
	"net/http"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// keySet is the decider's set of valid API keys, by the first 64 bits of
// their SHA-256. While the edge has one, a key outside it is refused on the
// request's headers, before its body is read or anything else is done; a
// key inside it still goes to the decider, which alone authenticates.
type keySet struct {
	version  uint64
	prefixes map[uint64]struct{}
}

// SetKeySet replaces the set of valid API keys with the decider's latest.
func (s *Server) SetKeySet(ks *switchboardv1.KeySet) {
	set := &keySet{version: ks.GetVersion(), prefixes: make(map[uint64]struct{}, len(ks.GetKeyPrefixes()))}
	for _, p := range ks.GetKeyPrefixes() {
		set.prefixes[p] = struct{}{}
	}
	s.known.Store(set)
}

// KeySetVersion is the version of the key set in force, 0 without one.
func (s *Server) KeySetVersion() uint64 {
	if set := s.known.Load(); set != nil {
		return set.version
	}
	return 0
}

// clientKey returns the hash of the request's API key, or the error for a
// missing or malformed key, or for one the decider's key set does not hold.
func (s *Server) clientKey(r *http.Request) (string, *apiError) {
	hash, aerr := apiKeyHash(r)
	if aerr != nil {
		return "", aerr
	}
	if set := s.known.Load(); set != nil {
		p, err := catalog.KeyPrefix(hash)
		if _, ok := set.prefixes[p]; err != nil || !ok {
			e := unauthorized("Incorrect API key provided.")
			return "", &e
		}
	}
	return hash, nil
}
