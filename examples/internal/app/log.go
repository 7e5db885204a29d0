package app

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	idem "github.com/idemkit/idem/core"
)

// LogFlags is -log-level: the level of the program's log/slog records,
// written as text to stderr (stdout carries only the "listening on" line).
type LogFlags struct{ level slog.Level }

// Register adds -log-level to fs.
func (l *LogFlags) Register(fs *flag.FlagSet) {
	l.level = slog.LevelInfo
	fs.TextVar(&l.level, "log-level", slog.LevelInfo, "log level: debug (every replay and execution), info, warn or error")
}

// Install makes the logger the default, and routes go-redis's own log
// lines (connection errors, once per failed dial) through it at warn
// level, so an outage reads as structured records, not stray lines.
func (l *LogFlags) Install() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l.level}))
	slog.SetDefault(logger)
	redis.SetLogger(redisLogger{logger})
}

// redisLogger is go-redis's internal.Logging on slog.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.WarnContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)), "source", "go-redis")
}

// LogEach is the engine option the examples use: one info-level line per
// request idem handles (executions and replays included, which
// idem.SlogObserver keeps at debug), on the default logger.
func LogEach() idem.Option {
	return idem.WithObserver(idem.SlogObserverLevel(nil, slog.LevelInfo))
}
