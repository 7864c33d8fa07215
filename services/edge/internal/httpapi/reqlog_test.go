package httpapi

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReqLogWritesWhatWithWrites: a request's lines are what a logger made
// by With("request_id", ...) writes, the source included (its line aside),
// and nothing below the handler's level.
func TestReqLogWritesWhatWithWrites(t *testing.T) {
	var got, want bytes.Buffer
	opts := &slog.HandlerOptions{AddSource: true, Level: slog.LevelInfo, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		switch a.Key {
		case slog.TimeKey:
			return slog.Attr{}
		case slog.SourceKey:
			src := *a.Value.Any().(*slog.Source)
			src.Line = 0
			return slog.Any(a.Key, &src)
		}
		return a
	}}
	for _, newHandler := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, opts) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, opts) },
	} {
		got.Reset()
		want.Reset()
		base := slog.New(newHandler(&want)).With("component", "httpapi")
		with := base.With("request_id", "gen-1")
		with.Info("chat completion", "model", "m", "stream", true, "duration", time.Second)
		with.Warn("chat completion failed", "model", "m", "status", 502, "error", "boom")
		with.Error("chat completion failed", "error", errors.New("bad"))
		with.Debug("not written")

		l := reqLog{ctx: context.Background(), log: slog.New(newHandler(&got)).With("component", "httpapi"), id: "gen-1"}
		l.Info("chat completion", "model", "m", "stream", true, "duration", time.Second)
		l.Warn("chat completion failed", "model", "m", "status", 502, "error", "boom")
		l.Error("chat completion failed", "error", errors.New("bad"))
		l.log.Debug("not written")
		require.Equal(t, want.String(), got.String())
		require.Contains(t, got.String(), "reqlog_test.go", "the caller is the source")
	}
}
