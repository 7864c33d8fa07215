// Package credentials holds the edge's provider credentials and decides, for
// each upstream call, whether a credential may go with it.
//
// The decider names the credential of each endpoint (api_key_env) and its
// base URL; whoever can write the catalog or tamper with the decider link
// controls both. So a name is honoured only inside the provider key
// namespace (a fixed prefix): the rest of the edge's environment (cloud
// credentials, its own tokens) can never be named. And a credential pinned
// to hosts is refused for a URL on any other host, before the request is
// made.
//
// Credentials come from environment variables or from a directory of files
// named as the credential (a mounted Secret). A file wins over a variable of
// the same name: the directory is what an operator rotates. The directory is
// re-read periodically, and a file only when its size or modification time
// changed, so rotation needs no restart and no request reads the disk.
package credentials

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
)

// HostsSuffix ends the name of a file of the directory that pins the
// credential named by the rest of its name to hosts, one or more per line
// or separated by commas.
const HostsSuffix = ".hosts"

// DefaultReload is how often the directory is re-read by default.
const DefaultReload = 10 * time.Second

// Errors a lookup returns. Neither ever carries a credential's value.
var (
	// ErrOutsideNamespace: the name is not a provider credential's.
	ErrOutsideNamespace = errors.New("not a provider credential name")
	// ErrHostNotAllowed: the credential is pinned to other hosts.
	ErrHostNotAllowed = errors.New("credential is not pinned to this host")
)

// Options configure a Store.
type Options struct {
	// Prefix starts every credential name (Optional). Defaults to
	// catalog.ProviderKeyPrefix.
	Prefix string
	// Getenv reads environment variables (Optional). Defaults to os.Getenv.
	Getenv func(string) string
	// Dir is the directory of credential files (Optional). Defaults to none.
	Dir string
	// Hosts pins credentials by name to the hosts they may be sent to; a
	// host without a port matches any port (Optional). Pins from the
	// directory's .hosts files add to these.
	Hosts map[string][]string
	// Reload is how often Dir is re-read (Optional). Defaults to 10s.
	Reload time.Duration
	// Logger logs reloads, never a value (Optional). Defaults to discarding.
	Logger *slog.Logger
}

// Store looks credentials up. It is safe for concurrent use.
type Store struct {
	opts Options
	log  *slog.Logger
	// files is the directory as last read.
	files atomic.Pointer[snapshot]

	// mu guards seen, the stat of each file as last read, so an
	// unchanged file is not read again.
	mu   sync.Mutex
	seen map[string]fileStamp
}

type snapshot struct {
	secrets map[string]string
	hosts   map[string][]string
}

type fileStamp struct {
	fi    os.FileInfo // the file read: a file replaced (renamed over, a Secret's new version) is another file
	value string
}

// same reports whether fi is the file st was read from, unchanged.
func (st fileStamp) same(fi os.FileInfo) bool {
	return os.SameFile(st.fi, fi) && st.fi.Size() == fi.Size() && st.fi.ModTime().Equal(fi.ModTime())
}

// New returns a Store, having read Dir once: a directory that cannot be
// read at start is an error, later failures keep the last good read.
func New(o Options) (*Store, error) {
	if o.Prefix == "" {
		o.Prefix = catalog.ProviderKeyPrefix
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Reload <= 0 {
		o.Reload = DefaultReload
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{opts: o, log: o.Logger, seen: map[string]fileStamp{}}
	for n := range o.Hosts {
		if !s.ValidName(n) {
			return nil, fmt.Errorf("provider key hosts: %q: %w (must be %s followed by A-Z, 0-9 or _)", n, ErrOutsideNamespace, o.Prefix)
		}
	}
	s.files.Store(&snapshot{})
	if o.Dir != "" {
		snap, err := s.read()
		if err != nil {
			return nil, err
		}
		s.files.Store(snap)
	}
	return s, nil
}

// ValidName reports whether name is in the provider credential namespace:
// the prefix followed by one or more of A-Z, 0-9 and _.
func (s *Store) ValidName(name string) bool {
	rest, ok := strings.CutPrefix(name, s.opts.Prefix)
	if !ok || rest == "" {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// Run re-reads the directory every Reload until ctx ends. Without a
// directory it returns at once.
func (s *Store) Run(ctx context.Context) {
	if s.opts.Dir == "" {
		return
	}
	t := time.NewTicker(s.opts.Reload)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			snap, err := s.read()
			if err != nil {
				s.log.Warn("provider key directory not re-read; keeping the credentials read before", "dir", s.opts.Dir, "err", err)
				continue
			}
			s.files.Store(snap)
		}
	}
}

// Lookup returns the credential name for a call to target: "" when there is
// none (the upstream is called without one), an error when the name is not
// a provider credential's or the credential is pinned to other hosts.
func (s *Store) Lookup(name string, target *url.URL) (string, error) {
	if !s.ValidName(name) {
		return "", fmt.Errorf("%q: %w (must be %s followed by A-Z, 0-9 or _)", name, ErrOutsideNamespace, s.opts.Prefix)
	}
	snap := s.files.Load()
	if pins := s.pins(snap, name); len(pins) > 0 && !allowed(pins, target) {
		return "", fmt.Errorf("%s to host %q: %w", name, target.Host, ErrHostNotAllowed)
	}
	if v, ok := snap.secrets[name]; ok {
		return v, nil
	}
	return s.opts.Getenv(name), nil
}

func (s *Store) pins(snap *snapshot, name string) []string {
	flag, file := s.opts.Hosts[name], snap.hosts[name]
	if len(file) == 0 {
		return flag
	}
	return append(slices.Clone(flag), file...)
}

// allowed reports whether target's host is among pins: "host" matches any
// port, "host:port" only that port.
func allowed(pins []string, target *url.URL) bool {
	if target == nil {
		return false
	}
	host, hostPort := strings.ToLower(target.Hostname()), strings.ToLower(target.Host)
	for _, p := range pins {
		if p == hostPort || p == host {
			return true
		}
	}
	return false
}

// read reads the directory: every credential file and every .hosts file,
// reusing the values of files whose size and modification time did not
// change since the last read.
func (s *Store) read() (*snapshot, error) {
	entries, err := os.ReadDir(s.opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("provider key directory: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := &snapshot{secrets: map[string]string{}, hosts: map[string][]string{}}
	seen := make(map[string]fileStamp, len(entries))
	for _, e := range entries {
		file := e.Name()
		name, isHosts := strings.CutSuffix(file, HostsSuffix)
		if !s.ValidName(name) {
			continue // ..data and other entries of a mounted Secret
		}
		path := filepath.Join(s.opts.Dir, file)
		// Stat follows the symbolic links a mounted Secret is made of.
		fi, err := os.Stat(path)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		st, ok := s.seen[file]
		if !ok || !st.same(fi) {
			data, err := os.ReadFile(path)
			if err != nil {
				s.log.Warn("provider key file not read", "file", file, "err", err)
				continue
			}
			st = fileStamp{fi: fi, value: strings.TrimSpace(string(data))}
			if ok {
				s.log.Info("provider key file changed", "file", file)
			}
		}
		seen[file] = st
		if isHosts {
			snap.hosts[name] = ParseHostList(st.value)
		} else {
			snap.secrets[name] = st.value
		}
	}
	s.seen = seen
	return snap, nil
}

// ParseHostList splits a list of hosts separated by commas, spaces or new
// lines, lowercased; lines starting with # are comments.
func ParseHostList(s string) []string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, h := range strings.FieldsFunc(line, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\r' }) {
			out = append(out, strings.ToLower(h))
		}
	}
	return out
}

// ParsePins parses "NAME=host[,host...][;NAME=host...]" into pins by name.
func ParsePins(s string) (map[string][]string, error) {
	out := map[string][]string{}
	var errs []error
	for part := range strings.SplitSeq(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, hosts, ok := strings.Cut(part, "=")
		list := ParseHostList(hosts)
		if !ok || strings.TrimSpace(name) == "" || len(list) == 0 {
			errs = append(errs, fmt.Errorf("%q: want NAME=host[,host...]", part))
			continue
		}
		for _, h := range list {
			if strings.ContainsAny(h, "/@") {
				errs = append(errs, fmt.Errorf("%q: a host, not a URL", h))
			}
		}
		name = strings.TrimSpace(name)
		out[name] = append(out[name], list...)
	}
	return out, errors.Join(errs...)
}
