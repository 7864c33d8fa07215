package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func TestClientKeyAgainstKeySet(t *testing.T) {
	s := New(Options{})
	req := func(key string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.Header.Set("Authorization", "Bearer "+key)
		return r
	}
	// Without a set, any well-formed key goes on to the decider.
	h, aerr := s.clientKey(req("sk-anything"))
	require.Nil(t, aerr)
	require.Equal(t, catalog.HashKey("sk-anything"), h)
	require.Zero(t, s.KeySetVersion())

	p, err := catalog.KeyPrefix(catalog.HashKey("sk-known"))
	require.NoError(t, err)
	s.SetKeySet(&switchboardv1.KeySet{KeyPrefixes: []uint64{p}, Version: 3})
	require.Equal(t, uint64(3), s.KeySetVersion())
	tests := []struct {
		name, key  string
		wantStatus int
	}{
		{name: "known", key: "sk-known"},
		{name: "unknown", key: "sk-anything", wantStatus: http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, aerr := s.clientKey(req(tt.key))
			if tt.wantStatus == 0 {
				require.Nil(t, aerr)
				return
			}
			require.NotNil(t, aerr)
			require.Equal(t, tt.wantStatus, aerr.status)
			require.Equal(t, "invalid_api_key", aerr.code)
		})
	}
	// An empty set refuses every key.
	s.SetKeySet(&switchboardv1.KeySet{Version: 4})
	_, aerr = s.clientKey(req("sk-known"))
	require.NotNil(t, aerr)
}
