package tests

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

const keysSimConfig = `
providers:
  - name: alpha
    listen: 127.0.0.1:0
    models:
      - id: sim-model
        ttft: {base: 1ms}
        default_output_tokens: 4
`

// keysCatalog is a one-endpoint catalog accepting the given client keys.
func keysCatalog(baseURL string, keys ...string) string {
	digests := make([]string, len(keys))
	for i, k := range keys {
		digests[i] = catalog.HashKey(k)
	}
	return fmt.Sprintf(`
models:
  - id: %s
    endpoints:
      - {provider: alpha, base_url: %s, upstream_model: %s, api_key_env: SWITCHBOARD_PROVIDER_KEY_ALPHA, price: {input: 0.1, output: 0.5}}
tenants:
  - {id: acme, api_keys_sha256: [%s]}
`, model, baseURL, simModel, strings.Join(digests, ", "))
}

// startKeysStack starts a simulator, a decider of keysCatalog (acme's key
// testKey) and an edge with edgeArgs, once the edge has the key set.
func startKeysStack(t *testing.T, edgeArgs ...string) *stack {
	t.Helper()
	s := startStack(t, stackOptions{sim: keysSimConfig, edgeArgs: edgeArgs,
		catalog: func(url func(string) string) string { return keysCatalog(url("alpha"), testKey) },
		tune:    func(c *deciderapp.Config) { c.ID = "keys-1" }})
	// The edge has the decider's key set once the Report stream is up.
	require.Eventually(t, func() bool { return s.edge.KeySetVersion() > 0 }, 20*time.Second, 10*time.Millisecond)
	return s
}

// keysChat sends a small chat request with key and returns its status.
func (s *stack) keysChat(t *testing.T, key string) int {
	t.Helper()
	body := `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.edge.URL()+"/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// An unknown key announcing a 32 MiB body it never sends is refused with
// 401 on its headers alone: the answer arrives while the body is unsent,
// and the connection is closed rather than drained. Before the decider
// pushed its key set, the edge waited for the body (408 after the body
// read timeout).
func TestUnknownKeyRefusedBeforeBody(t *testing.T) {
	s := startKeysStack(t, "--body-read-timeout=5s")
	require.Equal(t, http.StatusOK, s.keysChat(t, testKey), "a known key is served")

	conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", s.edge.Addr())
	require.NoError(t, err)
	defer conn.Close()
	// A hang guard only: a refused key is answered without waiting.
	require.NoError(t, conn.SetDeadline(time.Now().Add(time.Minute)))
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer sk-not-a-key-of-this-catalog\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"model\":", 32<<20)
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, string(body))
	require.Contains(t, string(body), `"code":"invalid_api_key"`)
	require.True(t, resp.Close, "the connection is not kept for the unsent body")
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the edge closed the connection")
}

// A key added to the catalog is accepted by a running edge once the
// decider pushes the new key set; nobody restarts anything.
func TestKeyAddedByCatalogChangeAccepted(t *testing.T) {
	s := startKeysStack(t)
	const newKey = "sk-added-later"
	require.Equal(t, http.StatusUnauthorized, s.keysChat(t, newKey))
	before := s.edge.KeySetVersion()

	// An operator rolls out a new catalog: another replica, started with
	// it on the same etcd, stores it; the edge's decider applies it.
	s.addReplica(t, "keys-2", func(c *deciderapp.Config) {
		c.Catalog = writeCatalog(t, c.DataDir, keysCatalog(s.sim.Provider("alpha").URL(), testKey, newKey))
	})
	require.Eventually(t, func() bool { return s.edge.KeySetVersion() > before }, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, http.StatusOK, s.keysChat(t, newKey))
	require.Equal(t, http.StatusOK, s.keysChat(t, testKey))
}

// A catalog naming a variable outside the provider key namespace is
// refused by the decider, naming the endpoint and the rule: no edge is ever
// told to send, say, its cloud credentials to a catalog's base_url.
func TestCatalogNamingForeignCredentialRefused(t *testing.T) {
	dir := t.TempDir()
	bad := strings.Replace(keysCatalog("https://evil.example/v1", testKey), "SWITCHBOARD_PROVIDER_KEY_ALPHA", "AWS_SECRET_ACCESS_KEY", 1)
	err := startRefused(t, deciderapp.Config{
		Listen: "127.0.0.1:0", EtcdListen: "127.0.0.1:0", DataDir: dir, ID: "keys-bad",
		Catalog: writeCatalog(t, dir, bad), ShutdownTimeout: 5 * time.Second,
	})
	require.ErrorContains(t, err, "api_key_env")
	require.ErrorContains(t, err, "alpha/"+model)
	require.ErrorContains(t, err, catalog.ProviderKeyPrefix)
}
