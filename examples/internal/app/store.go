package app

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/examples/internal/orders"
	"github.com/idemkit/idem/examples/internal/ordersql"
	dynamostore "github.com/idemkit/idem/stores/dynamodb"
	memstore "github.com/idemkit/idem/stores/memory"
	mysqlstore "github.com/idemkit/idem/stores/mysql"
	pgxstore "github.com/idemkit/idem/stores/pgx"
	redisstore "github.com/idemkit/idem/stores/redis"
	sqlitestore "github.com/idemkit/idem/stores/sqlite"
)

// StoreFlags choose and address the store of an example program. Each
// program keeps its records apart (its own Redis prefix and table), so one
// example's stored responses are never replayed by another.
type StoreFlags struct {
	Kind        string // memory, redis, postgres or mysql
	RedisURL    string
	RedisPrefix string
	PostgresURL string
	PGTable     string
	MySQLDSN    string
	MySQLTable  string
	DynamoURL   string
	DynamoTable string
	SQLitePath  string
	SQLiteTable string
	ExactlyOnce bool   // postgres, mysql, sqlite and dynamodb: the engine gets store.ExactlyOnce()
	AsyncClaims bool   // postgres: pgxstore.WithAsyncClaims
	KeysFile    string // -encryption-keys: idem.WithEncryption with its keys

	keys []idem.EncryptionKey // read from KeysFile by Validate

	pool *pgxpool.Pool // set by Open for postgres
	db   *sql.DB       // set by Open for mysql
	lite *sql.DB       // set by Open for sqlite
}

// Register adds -store, -redis-url, -redis-prefix, -postgres-url,
// -pg-table, -mysql-dsn, -mysql-table, -exactly-once, -async-claims and
// -encryption-keys (and the DynamoDB and SQLite ones) to fs, with the
// prefix and tables named for program. The addresses default to
// $IDEM_REDIS_URL, $IDEM_POSTGRES_URL and $IDEM_MYSQL_DSN, then to the
// local servers.
func (f *StoreFlags) Register(fs *flag.FlagSet, program string) {
	fs.StringVar(&f.Kind, "store", "memory", "idempotency store: memory, redis, postgres, mysql, sqlite or dynamodb; a shared store that does not answer at start-up stops the program (exit 1), one that fails later answers 503 until it is back")
	fs.StringVar(&f.RedisURL, "redis-url", envOr("IDEM_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL (-store redis; default $IDEM_REDIS_URL, else the local server)")
	fs.StringVar(&f.RedisPrefix, "redis-prefix", "idem:"+program+":", "prefix of the Redis keys (-store redis)")
	fs.StringVar(&f.PostgresURL, "postgres-url", envOr("IDEM_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL (-store postgres; default $IDEM_POSTGRES_URL, else the local server)")
	fs.StringVar(&f.PGTable, "pg-table", "idem_"+program, "PostgreSQL table of the records (-store postgres)")
	fs.StringVar(&f.MySQLDSN, "mysql-dsn", envOr("IDEM_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test"), "MySQL DSN, go-sql-driver syntax (-store mysql; default $IDEM_MYSQL_DSN, else the local server)")
	fs.StringVar(&f.MySQLTable, "mysql-table", "idem_"+program, "MySQL table of the records (-store mysql)")
	fs.StringVar(&f.DynamoURL, "dynamodb-url", envOr("IDEM_DYNAMODB_URL", ""), "DynamoDB endpoint, e.g. http://127.0.0.1:8000 for dynalite (-store dynamodb; default $IDEM_DYNAMODB_URL, else AWS as the environment configures it)")
	fs.StringVar(&f.DynamoTable, "dynamodb-table", "idem_"+program, "DynamoDB table of the records, created when missing (-store dynamodb)")
	fs.StringVar(&f.SQLitePath, "sqlite-path", "idem_"+program+".db", "SQLite database file, created if missing (-store sqlite)")
	fs.StringVar(&f.SQLiteTable, "sqlite-table", "idem_"+program, "SQLite table of the records (-store sqlite)")
	fs.BoolVar(&f.ExactlyOnce, "exactly-once", false, "run each claimed request in a transaction that commits with its record (-store postgres, mysql, sqlite or dynamodb)")
	fs.BoolVar(&f.AsyncClaims, "async-claims", false, "commit claims without waiting for their WAL flush, one flush per first request instead of two; a database crash may then lose a claim taken in its last ~600 ms (-store postgres; see README, Durability)")
	fs.StringVar(&f.KeysFile, "encryption-keys", "", "file of encryption keys, one ID:BASE64 line per 32-byte key (head -c 32 /dev/urandom | base64): stored responses are sealed with AES-256-GCM; every key reads, the last one writes (default: not encrypted)")
}

// String names the store for the start-up line: its kind and where it is
// (without credentials).
func (f *StoreFlags) String() string {
	mode := ""
	if f.ExactlyOnce {
		mode = ", exactly-once"
	}
	switch f.Kind {
	case "redis":
		if u, err := url.Parse(f.RedisURL); err == nil {
			return "redis " + u.Host + " prefix " + f.RedisPrefix
		}
	case "postgres":
		if u, err := url.Parse(f.PostgresURL); err == nil {
			return "postgres " + u.Host + u.Path + " table " + f.PGTable + mode
		}
	case "mysql":
		if cfg, err := mysql.ParseDSN(f.MySQLDSN); err == nil {
			return "mysql " + cfg.Addr + "/" + cfg.DBName + " table " + f.MySQLTable + mode
		}
	case "sqlite":
		return "sqlite " + f.SQLitePath + " table " + f.SQLiteTable + mode
	case "dynamodb":
		where := "AWS"
		if u, err := url.Parse(f.DynamoURL); err == nil && u.Host != "" {
			where = u.Host
		}
		return "dynamodb " + where + " table " + f.DynamoTable + mode
	}
	return f.Kind
}

// Engine returns the engine options the store flags ask for: WithEncryption
// with the -encryption-keys file's keys, when given.
func (f *StoreFlags) Engine() []idem.Option {
	if len(f.keys) == 0 {
		return nil
	}
	return []idem.Option{idem.WithEncryption(f.keys...)}
}

// readKeys reads the -encryption-keys file.
func (f *StoreFlags) readKeys() error {
	if f.KeysFile == "" {
		return nil
	}
	file, err := os.Open(f.KeysFile)
	if err != nil {
		return fmt.Errorf("-encryption-keys: %w", err)
	}
	defer file.Close()
	if f.keys, err = idem.ParseEncryptionKeys(file); err != nil {
		return fmt.Errorf("-encryption-keys %s: %w", f.KeysFile, err)
	}
	return nil
}

// Validate reports a bad flag value, and reads the -encryption-keys file.
func (f *StoreFlags) Validate() error {
	switch f.Kind {
	case "memory", "redis", "postgres", "mysql", "sqlite", "dynamodb":
	default:
		return fmt.Errorf("-store %q: want memory, redis, postgres, mysql, sqlite or dynamodb", f.Kind)
	}
	if f.ExactlyOnce && (f.Kind == "memory" || f.Kind == "redis") {
		return errors.New("-exactly-once needs -store postgres, mysql, sqlite or dynamodb")
	}
	if f.AsyncClaims && f.Kind != "postgres" {
		return errors.New("-async-claims needs -store postgres")
	}
	return f.readKeys()
}

// Open returns the chosen store (in exactly-once mode with -exactly-once)
// and a function that closes it. With PostgreSQL and MySQL it creates the
// table when it does not exist.
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
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = client.Ping(pctx).Err()
		cancel()
		if err != nil {
			client.Close()
			return nil, nil, fmt.Errorf("-redis-url %s: Redis does not answer: %w", f.RedisURL, err)
		}
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
		opts := []pgxstore.Option{pgxstore.WithTable(f.PGTable)}
		if f.AsyncClaims {
			opts = append(opts, pgxstore.WithAsyncClaims())
		}
		s, err := pgxstore.New(pool, opts...)
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = s.CreateSchema(sctx)
		cancel()
		if err != nil {
			s.Close()
			pool.Close()
			return nil, nil, fmt.Errorf("-postgres-url: creating the PostgreSQL table %s: %w", f.PGTable, err)
		}
		f.pool = pool
		if f.ExactlyOnce {
			return s.ExactlyOnce(), func() { s.Close(); pool.Close() }, nil
		}
		return s, func() { s.Close(); pool.Close() }, nil
	case "mysql":
		cfg, err := mysql.ParseDSN(f.MySQLDSN)
		if err != nil {
			return nil, nil, fmt.Errorf("-mysql-dsn: %w", err)
		}
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("-mysql-dsn: %w", err)
		}
		db := sql.OpenDB(conn)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = db.PingContext(pctx)
		cancel()
		if err != nil {
			db.Close()
			return nil, nil, fmt.Errorf("-mysql-dsn: MySQL at %s does not answer: %w", cfg.Addr, err)
		}
		s, err := mysqlstore.New(db, mysqlstore.WithTable(f.MySQLTable))
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = s.CreateSchema(sctx)
		cancel()
		if err != nil {
			s.Close()
			db.Close()
			return nil, nil, fmt.Errorf("-mysql-dsn: creating the MySQL table %s: %w", f.MySQLTable, err)
		}
		f.db = db
		if f.ExactlyOnce {
			return s.ExactlyOnce(), func() { s.Close(); db.Close() }, nil
		}
		return s, func() { s.Close(); db.Close() }, nil
	case "sqlite":
		db, err := sqlitestore.Open(f.SQLitePath)
		if err != nil {
			return nil, nil, fmt.Errorf("-sqlite-path: %w", err)
		}
		s, err := sqlitestore.New(db, sqlitestore.WithTable(f.SQLiteTable))
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = s.CreateSchema(sctx)
		cancel()
		if err != nil {
			s.Close()
			db.Close()
			return nil, nil, fmt.Errorf("-sqlite-path: creating the SQLite table %s in %s: %w", f.SQLiteTable, f.SQLitePath, err)
		}
		f.lite = db
		if f.ExactlyOnce {
			return s.ExactlyOnce(), func() { s.Close(); db.Close() }, nil
		}
		return s, func() { s.Close(); db.Close() }, nil
	case "dynamodb":
		return f.openDynamo(ctx)
	}
	return nil, nil, f.Validate()
}

// openDynamo opens -store dynamodb: AWS as the environment configures it,
// or the endpoint -dynamodb-url names (dynalite takes any credentials).
func (f *StoreFlags) openDynamo(ctx context.Context) (idem.Store, func(), error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("-store dynamodb: loading the AWS configuration: %w", err)
	}
	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if f.DynamoURL == "" {
			return
		}
		o.BaseEndpoint = aws.String(f.DynamoURL)
		if o.Region == "" {
			o.Region = "us-east-1"
		}
		if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
			o.Credentials = credentials.NewStaticCredentialsProvider("local", "local", "")
		}
	})
	s, err := dynamostore.New(client, dynamostore.WithTable(f.DynamoTable))
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = s.CreateTable(sctx)
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("-dynamodb-url %s: creating the DynamoDB table %s: %w", f.DynamoURL, f.DynamoTable, err)
	}
	if f.ExactlyOnce {
		return s.ExactlyOnce(), func() {}, nil
	}
	return s, func() {}, nil
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

// Orders returns where the orders examples keep their orders and
// payments. With -exactly-once on PostgreSQL, MySQL or SQLite, in tables
// named for the store's table (idem_chi_orders and idem_chi_payments
// beside idem_chi), written
// through each request's transaction: an order and its stored answer
// commit together or not at all. Otherwise in memory. Call it after Open.
func (f *StoreFlags) Orders(ctx context.Context) (orders.Repo, error) {
	if !f.ExactlyOnce {
		return orders.NewMemory(), nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	switch {
	case f.pool != nil:
		r, err := ordersql.NewPostgres(ctx, f.pool, f.PGTable)
		if err != nil {
			return nil, fmt.Errorf("-postgres-url: %w", err)
		}
		return r, nil
	case f.db != nil:
		r, err := ordersql.NewMySQL(ctx, f.db, f.MySQLTable)
		if err != nil {
			return nil, fmt.Errorf("-mysql-dsn: %w", err)
		}
		return r, nil
	case f.lite != nil:
		r, err := ordersql.NewSQLite(ctx, f.lite, f.SQLiteTable)
		if err != nil {
			return nil, fmt.Errorf("-sqlite-path: %w", err)
		}
		return r, nil
	}
	return orders.NewMemory(), nil // DynamoDB: the orders stay in memory
}

// MustOrders is Orders for main: it exits with a message on an error.
func (f *StoreFlags) MustOrders(ctx context.Context) *orders.Service {
	repo, err := f.Orders(ctx)
	if err != nil {
		Fatal(err, false)
	}
	return orders.NewWith(repo)
}
