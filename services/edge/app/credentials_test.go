package app

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

// cloudSecret stands for anything of the edge's environment that is not a
// provider credential.
const cloudSecret = "aws-secret-do-not-send-9f8e7d"

// withEndpoints makes the fake decider answer every Decide with eps.
func (h *harness) withEndpoints(eps ...*switchboardv1.Endpoint) {
	h.fd.SetDecide(func(req *switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) {
		d := h.decision(req)
		d.Endpoint, d.Fallbacks = eps[0], eps[1:]
		d.Reservation = nil // no broker in play: every endpoint is tried as is
		return d, nil
	})
}

// endpoint copies the harness's endpoint i with base URL and credential name changed.
func (h *harness) endpoint(i int, baseURL, keyName string) *switchboardv1.Endpoint {
	return &switchboardv1.Endpoint{
		Id: h.eps[i].GetId(), Provider: h.eps[i].GetProvider(), BaseUrl: baseURL,
		UpstreamModel: h.eps[i].GetUpstreamModel(), ApiKeyEnv: keyName, Price: h.eps[i].GetPrice(),
	}
}

// seen is every request up received, on any path, as "path authorization".
func seen(up *fakeupstream.Server) []string {
	var out []string
	for _, r := range up.Requests() {
		out = append(out, r.Path+" "+r.Authorization)
	}
	return out
}

// A decider (or whoever tampers with its answers) naming a variable outside
// the provider key namespace gets nothing: the edge refuses the name before
// any request, says so to the client, and logs neither the value nor sends it.
func TestCredentialOutsideNamespaceNeverSent(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) {
		base := c.Getenv
		c.Getenv = func(k string) string {
			if k == "AWS_SECRET_ACCESS_KEY" {
				return cloudSecret
			}
			return base(k)
		}
	})
	evil := fakeupstream.Start(t)
	evil.SetMode(fakeupstream.Unavailable)
	h.withEndpoints(h.endpoint(0, evil.BaseURL(), "AWS_SECRET_ACCESS_KEY"))

	r := h.chat(plainReq, authed())
	for _, got := range seen(evil) {
		require.NotContains(t, got, cloudSecret)
	}
	require.Empty(t, seen(evil), "no request goes to an endpoint whose credential was refused")
	require.Equal(t, http.StatusBadGateway, r.status, r.body)
	e := r.errorJSON(t)
	require.Contains(t, e["message"], "credential")
	require.NotContains(t, h.logs.String(), cloudSecret)
	require.Contains(t, h.logs.String(), "AWS_SECRET_ACCESS_KEY", "the refused name is logged")
}

// A credential pinned to its provider's hosts is not sent to a base URL on
// another host, whatever the decider says; the next endpoint serves.
func TestPinnedCredentialNotSentToAnotherHost(t *testing.T) {
	h := newHarness(t, 2, func(c *Config) {
		c.ProviderKeyHosts = "SWITCHBOARD_PROVIDER_KEY_ALPHA=alpha.example.com,localhost"
	})
	other := fakeupstream.Start(t)
	other.SetMode(fakeupstream.Unavailable)
	h.withEndpoints(
		h.endpoint(0, other.BaseURL(), "SWITCHBOARD_PROVIDER_KEY_ALPHA"),
		h.endpoint(1, h.ups[1].BaseURL(), "SWITCHBOARD_PROVIDER_KEY_BETA"),
	)
	r := h.chat(plainReq, authed())
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "beta", r.header.Get("X-Switchboard-Provider"))
	require.Empty(t, seen(other), "the pinned credential's endpoint on another host is never called")
	require.NotContains(t, h.logs.String(), providerKey("alpha"))

	// On a host it is pinned to, it goes (localhost resolves to the
	// fake provider's loopback address).
	local := strings.Replace(h.ups[0].BaseURL(), "127.0.0.1", "localhost", 1)
	h.withEndpoints(h.endpoint(0, local, "SWITCHBOARD_PROVIDER_KEY_ALPHA"))
	r = h.chat(plainReq, authed())
	require.Equal(t, http.StatusOK, r.status, r.body)
	up := h.ups[0].Requests()
	require.Len(t, up, 1)
	require.Equal(t, "Bearer "+providerKey("alpha"), up[0].Authorization)
}

// A provider answering with a redirect does not get the edge to carry the
// credential anywhere, even on its own host.
func TestRedirectDoesNotCarryCredential(t *testing.T) {
	h := newHarness(t, 2, nil)
	up := fakeupstream.Start(t)
	up.SetMode(fakeupstream.Redirect)
	h.withEndpoints(
		h.endpoint(0, up.BaseURL(), "SWITCHBOARD_PROVIDER_KEY_ALPHA"),
		h.endpoint(1, h.ups[1].BaseURL(), "SWITCHBOARD_PROVIDER_KEY_BETA"),
	)
	r := h.chat(plainReq, authed())
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "beta", r.header.Get("X-Switchboard-Provider"), "a redirect is a failed attempt")
	require.Equal(t, []string{"/v1/chat/completions Bearer " + providerKey("alpha")}, seen(up),
		"the redirect is not followed")
}

// Credentials in the provider key directory win over the environment and
// are picked up when the file changes, without a restart.
func TestProviderKeyDirRotation(t *testing.T) {
	dir := t.TempDir()
	write := func(v string) {
		tmp := filepath.Join(dir, ".tmp")
		require.NoError(t, os.WriteFile(tmp, []byte(v+"\n"), 0o600))
		require.NoError(t, os.Rename(tmp, filepath.Join(dir, "SWITCHBOARD_PROVIDER_KEY_ALPHA")))
	}
	write("from-file-v1")
	h := newHarness(t, 1, func(c *Config) {
		c.ProviderKeyDir = dir
		c.ProviderKeyReload = 20 * time.Millisecond
	})
	r := h.chat(plainReq, authed())
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "Bearer from-file-v1", h.ups[0].Requests()[0].Authorization, "the file wins over the environment")

	write("from-file-v2")
	require.Eventually(t, func() bool {
		r := h.chat(plainReq, authed())
		require.Equal(t, http.StatusOK, r.status, r.body)
		reqs := h.ups[0].Requests()
		return reqs[len(reqs)-1].Authorization == "Bearer from-file-v2"
	}, 10*time.Second, 20*time.Millisecond)
	require.NotContains(t, h.logs.String(), "from-file-v")
}
