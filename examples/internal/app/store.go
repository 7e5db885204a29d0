package app

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
	pgxstore "github.com/idemkit/idem/stores/pgx"
	redisstore "github.com/idemkit/idem/stores/redis"
)

// StoreFlags choose and address the store of an example program.
type StoreFlags struct {
	Kind        string // memory, redis or postgres
	RedisURL    string
	RedisPrefix string
	PostgresURL string
	PGTable     string
	ExactlyOnce bool // postgres only: pgxstore's exactly-once mode
}

// Register adds -store, -redis-url, -redis-prefix, -postgres-url,
// -pg-table and -exactly-once to fs. The URLs default to $IDEM_REDIS_URL and
// $IDEM_POSTGRES_URL, then to the local servers.
func (f *StoreFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Kind, "store", "memory", "idempotency store: memory, redis or postgres")
	fs.StringVar(&f.RedisURL, "redis-url", envOr("IDEM_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL (-store redis)")
	fs.StringVar(&f.RedisPrefix, "redis-prefix", redisstore.DefaultPrefix, "prefix of the Redis keys (-store redis)")
	fs.StringVar(&f.PostgresURL, "postgres-url", envOr("IDEM_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL (-store postgres)")
	fs.StringVar(&f.PGTable, "pg-table", pgxstore.DefaultTable, "PostgreSQL table of the records (-store postgres)")
	fs.BoolVar(&f.ExactlyOnce, "exactly-once", false, "commit the handler's writes with the record in one transaction (-store postgres)")
}

// Validate reports a bad flag value.
func (f *StoreFlags) Validate() error {
	switch {
	case f.ExactlyOnce && f.Kind != "postgres":
		return fmt.Errorf("-exactly-once needs -store postgres, not %q", f.Kind)
	case f.Kind == "memory", f.Kind == "redis", f.Kind == "postgres":
		return nil
	}
	return fmt.Errorf("-store %q: want memory, redis or postgres", f.Kind)
}

// Open returns the chosen store and a function that closes it. With
// PostgreSQL it creates the table when it does not exist, and with
// -exactly-once it returns the store's exactly-once view, whose handlers
// reach their transaction with pgxstore.Tx.
func (f *StoreFlags) Open(ctx context.Context) (idem.Store, func(), error) {
	switch f.Kind {
	case "memory":
		s := memstore.New()
		return s, func() { s.Close() }, nil
	case "redis":
		opt, err := redis.ParseURL(f.RedisURL)
		if err != nil {
			return nil, nil, fmt.Errorf("-redis-url: %w", err)
		}
		opt.ContextTimeoutEnabled = true // honour the engine's store timeout
		client := redis.NewClient(opt)
		s, err := redisstore.New(client, redisstore.WithPrefix(f.RedisPrefix))
		if err != nil {
			client.Close()
			return nil, nil, err
		}
		return s, func() { s.Close(); client.Close() }, nil
	case "postgres":
		pool, err := pgxpool.New(ctx, f.PostgresURL)
		if err != nil {
			return nil, nil, fmt.Errorf("-postgres-url: %w", err)
		}
		s, err := pgxstore.New(pool, pgxstore.WithTable(f.PGTable))
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		if err := s.CreateSchema(ctx); err != nil {
			s.Close()
			pool.Close()
			return nil, nil, fmt.Errorf("creating the schema: %w", err)
		}
		if f.ExactlyOnce {
			return s.ExactlyOnce(), func() { s.Close(); pool.Close() }, nil
		}
		return s, func() { s.Close(); pool.Close() }, nil
	}
	return nil, nil, f.Validate()
}

// MustOpen is Open for main: it exits with a message when the store cannot
// be opened.
func (f *StoreFlags) MustOpen(ctx context.Context) (idem.Store, func()) {
	s, closeStore, err := f.Open(ctx)
	if err != nil {
		Fatal(err, false)
	}
	return s, closeStore
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Fatal prints err and exits with status 1, or 2 for a usage error.
func Fatal(err error, usage bool) {
	fmt.Fprintln(os.Stderr, "error:", err)
	if usage {
		os.Exit(2)
	}
	os.Exit(1)
}
