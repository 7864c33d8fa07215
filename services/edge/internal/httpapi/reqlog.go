package httpapi

import (
	"context"
	"log/slog"
	"runtime"
	"time"
)

// reqLog logs the lines of one request, each with its request_id first, as
// a logger made by With would, without making that logger for every
// request: most of its lines are never written.
type reqLog struct {
	// ctx is the context its lines are logged under.
	ctx context.Context
	log *slog.Logger
	id  string
}

// Info logs at info level, as [slog.Logger.Info].
func (l reqLog) Info(msg string, args ...any) { l.write(slog.LevelInfo, msg, args) }

// Warn logs at warn level, as [slog.Logger.Warn].
func (l reqLog) Warn(msg string, args ...any) { l.write(slog.LevelWarn, msg, args) }

// Error logs at error level, as [slog.Logger.Error].
func (l reqLog) Error(msg string, args ...any) { l.write(slog.LevelError, msg, args) }

// write logs one line at level, recording its caller's caller as its
// source, as slog's own methods do.
func (l reqLog) write(level slog.Level, msg string, args []any) {
	if !l.log.Enabled(l.ctx, level) {
		return
	}
	var pcs [1]uintptr
	runtime.Callers(3, pcs[:]) // skip Callers, write and Info (or Warn, Error)
	rec := slog.NewRecord(time.Now(), level, msg, pcs[0])
	rec.AddAttrs(slog.String("request_id", l.id))
	rec.Add(args...)
	_ = l.log.Handler().Handle(l.ctx, rec)
}
