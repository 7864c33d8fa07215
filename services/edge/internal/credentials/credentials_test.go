package credentials

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLookup(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "SWITCHBOARD_PROVIDER_KEY_FILE"), []byte("from-file\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "SWITCHBOARD_PROVIDER_KEY_FILE.hosts"), []byte("# the provider\nfile.example\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "OTHER"), []byte("not a provider key"), 0o600))
	env := map[string]string{
		"SWITCHBOARD_PROVIDER_KEY_FILE": "from-env", "SWITCHBOARD_PROVIDER_KEY_ENV": "env-only",
		"SWITCHBOARD_PROVIDER_KEY_PINNED": "sk-pin-value", "AWS_SECRET_ACCESS_KEY": "cloud", "OTHER": "other",
	}
	s, err := New(Options{Getenv: func(k string) string { return env[k] }, Dir: dir,
		Hosts: map[string][]string{"SWITCHBOARD_PROVIDER_KEY_PINNED": {"a.example", "b.example:8443"}}})
	require.NoError(t, err)
	tests := []struct {
		name, key, url, want string
		wantErr              error
	}{
		{name: "env", key: "SWITCHBOARD_PROVIDER_KEY_ENV", url: "https://any.example/v1", want: "env-only"},
		{name: "file wins over env", key: "SWITCHBOARD_PROVIDER_KEY_FILE", url: "https://file.example/v1", want: "from-file"},
		{name: "file pinned elsewhere", key: "SWITCHBOARD_PROVIDER_KEY_FILE", url: "https://evil.example/v1", wantErr: ErrHostNotAllowed},
		{name: "unset", key: "SWITCHBOARD_PROVIDER_KEY_NONE", url: "https://x.example/v1", want: ""},
		{name: "outside namespace", key: "AWS_SECRET_ACCESS_KEY", url: "https://x.example/v1", wantErr: ErrOutsideNamespace},
		{name: "file outside namespace", key: "OTHER", url: "https://x.example/v1", wantErr: ErrOutsideNamespace},
		{name: "lower case", key: "SWITCHBOARD_PROVIDER_KEY_env", url: "https://x.example/v1", wantErr: ErrOutsideNamespace},
		{name: "prefix alone", key: "SWITCHBOARD_PROVIDER_KEY_", url: "https://x.example/v1", wantErr: ErrOutsideNamespace},
		{name: "pinned host any port", key: "SWITCHBOARD_PROVIDER_KEY_PINNED", url: "https://A.example:9/v1", want: "sk-pin-value"},
		{name: "pinned host and port", key: "SWITCHBOARD_PROVIDER_KEY_PINNED", url: "https://b.example:8443/v1", want: "sk-pin-value"},
		{name: "pinned host other port", key: "SWITCHBOARD_PROVIDER_KEY_PINNED", url: "https://b.example/v1", wantErr: ErrHostNotAllowed},
		{name: "pinned other host", key: "SWITCHBOARD_PROVIDER_KEY_PINNED", url: "https://a.example.evil/v1", wantErr: ErrHostNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			require.NoError(t, err)
			got, err := s.Lookup(tt.key, u)
			if tt.wantErr != nil {
				require.True(t, errors.Is(err, tt.wantErr), "err %v", err)
				require.Empty(t, got)
				for _, v := range env {
					require.NotContains(t, err.Error(), v, "an error never carries a value")
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestNewErrors(t *testing.T) {
	_, err := New(Options{Dir: filepath.Join(t.TempDir(), "missing")})
	require.Error(t, err)
	_, err = New(Options{Hosts: map[string][]string{"HOME": {"x"}}})
	require.ErrorIs(t, err, ErrOutsideNamespace)
}

func TestParsePins(t *testing.T) {
	got, err := ParsePins(" A=x.example, Y.example:1 ; B=z ")
	require.NoError(t, err)
	require.Equal(t, map[string][]string{"A": {"x.example", "y.example:1"}, "B": {"z"}}, got)
	_, err = ParsePins("A=;B")
	require.Error(t, err)
}

// A key replaced by another of the same length whose file carries the same
// modification time (written within one tick of the file system's clock,
// or with its time preserved by the tool that wrote it) is still picked
// up: a replaced file is a new file.
func TestReplacedFileWithSameSizeAndTimeIsReRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "SWITCHBOARD_PROVIDER_KEY_ALPHA")
	require.NoError(t, os.WriteFile(path, []byte("sk-old-value\n"), 0o600))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	s, err := New(Options{Getenv: func(string) string { return "" }, Dir: dir})
	require.NoError(t, err)
	target, err := url.Parse("https://alpha.example/v1")
	require.NoError(t, err)
	got, err := s.Lookup("SWITCHBOARD_PROVIDER_KEY_ALPHA", target)
	require.NoError(t, err)
	require.Equal(t, "sk-old-value", got)

	tmp := filepath.Join(dir, ".tmp")
	require.NoError(t, os.WriteFile(tmp, []byte("sk-new-value\n"), 0o600))
	require.NoError(t, os.Chtimes(tmp, fi.ModTime(), fi.ModTime()))
	require.NoError(t, os.Rename(tmp, path))
	snap, err := s.read()
	require.NoError(t, err)
	s.files.Store(snap)
	got, err = s.Lookup("SWITCHBOARD_PROVIDER_KEY_ALPHA", target)
	require.NoError(t, err)
	require.Equal(t, "sk-new-value", got)
}

// TestValidNameIsTheNamespacePattern: a name is valid exactly when it
// matches ^PREFIX[A-Z0-9_]+$.
func TestValidNameIsTheNamespacePattern(t *testing.T) {
	for _, prefix := range []string{"SWITCHBOARD_PROVIDER_KEY_", "P.K+"} {
		s, err := New(Options{Prefix: prefix, Getenv: func(string) string { return "" }})
		require.NoError(t, err)
		re := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `[A-Z0-9_]+$`)
		for _, rest := range []string{"", "A", "OPENAI", "OPENAI_2", "_", "9", "openai", "A-B", "A\n", "A B", "É", "A\x00", "ABC$", "\nA"} {
			for _, name := range []string{prefix + rest, rest, "X" + prefix + rest, prefix[:len(prefix)-1] + rest} {
				require.Equal(t, re.MatchString(name), s.ValidName(name), "prefix %q, name %q", prefix, name)
			}
		}
	}
}
