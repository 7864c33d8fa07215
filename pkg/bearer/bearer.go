// Package bearer sends a bearer token on every gRPC call, as the metadata
// "authorization: Bearer <token>". The token is read from a file and read
// again when the file changes, so a token is rotated without a restart.
package bearer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// Token returns credentials that always send token.
func Token(token string) credentials.PerRPCCredentials { return static(token) }

type static string

func (s static) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(s)}, nil
}

func (static) RequireTransportSecurity() bool { return false }

// File is credentials whose token is a file's content, surrounding white
// space trimmed. It looks at the file at most once per Every.
type File struct {
	path  string
	every time.Duration
	now   func() time.Time

	mu      sync.Mutex
	checked time.Time
	mod     time.Time
	size    int64
	token   string
}

// Options tune a File. The zero value is fine.
type Options struct {
	// Every is how often the file is checked for a change. (Optional)
	// Defaults to 1s; negative checks on every call.
	Every time.Duration
	// Now is the clock of Every. (Optional) Defaults to time.Now.
	Now func() time.Time
}

// NewFile reads the token at path, and fails when it cannot or it is empty.
func NewFile(path string, o Options) (*File, error) {
	if o.Every == 0 {
		o.Every = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	f := &File{path: path, every: o.Every, now: o.Now}
	if err := f.load(); err != nil {
		return nil, err
	}
	return f, nil
}

// load reads the file when its modification time or size changed.
func (f *File) load() error {
	fi, err := os.Stat(f.path)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	if f.token != "" && fi.ModTime().Equal(f.mod) && fi.Size() == f.size {
		return nil
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return fmt.Errorf("token file %s is empty", f.path)
	}
	if strings.ContainsAny(tok, " \t\r\n") {
		return fmt.Errorf("token file %s: the token must be one word", f.path)
	}
	f.token, f.mod, f.size = tok, fi.ModTime(), fi.Size()
	return nil
}

// current returns the token, reading the file again when it changed. A file
// that became unreadable or empty keeps the last good token: a rotation in
// progress must not fail calls.
func (f *File) current() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if f.every < 0 || now.Sub(f.checked) >= f.every {
		f.checked = now
		if err := f.load(); err != nil && f.token == "" {
			return "", err
		}
	}
	if f.token == "" {
		return "", errors.New("no bearer token")
	}
	return f.token, nil
}

// GetRequestMetadata implements [credentials.PerRPCCredentials].
func (f *File) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	tok, err := f.current()
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

// RequireTransportSecurity implements [credentials.PerRPCCredentials]: false,
// because serving plaintext is a choice made, explicitly, elsewhere.
func (*File) RequireTransportSecurity() bool { return false }
