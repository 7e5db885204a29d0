package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// sharedStore is the store the instances share: where it is, the flags
// that put an instance on it through a proxy, and the direct access this
// program needs to read the committed executions and clean up.
type sharedStore struct {
	c         *config
	target    string // host:port the proxies forward to
	prefix    string // Redis key prefix
	table     string // the idempotency records' table
	execTable string // the executions' table, in exactly-once mode
}

func newSharedStore(c *config, runID string) (*sharedStore, error) {
	s := &sharedStore{c: c, prefix: "chaos-" + runID + ":", table: "chaos_" + runID}
	if c.exactlyOnce {
		s.execTable = s.table + "_exec"
	}
	switch c.store {
	case "redis":
		if _, err := redis.ParseURL(c.redisURL); err != nil {
			return nil, fmt.Errorf("-redis-url: %w", err)
		}
		u, _ := url.Parse(c.redisURL)
		s.target = withPort(u.Host, "6379")
	case "postgres":
		u, err := url.Parse(c.postgresURL)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return nil, fmt.Errorf("-postgres-url %q: want a postgres:// URL", c.postgresURL)
		}
		s.target = withPort(u.Host, "5432")
	case "mysql":
		cfg, err := mysql.ParseDSN(c.mysqlDSN)
		if err != nil {
			return nil, fmt.Errorf("-mysql-dsn: %w", err)
		}
		if cfg.Net != "tcp" {
			return nil, fmt.Errorf("-mysql-dsn: the proxies need tcp, not %q", cfg.Net)
		}
		s.target = withPort(cfg.Addr, "3306")
	}
	conn, err := net.DialTimeout("tcp", s.target, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("the %s server at %s does not answer: %w", c.store, s.target, err)
	}
	conn.Close()
	return s, nil
}

func withPort(host, port string) string {
	if host == "" {
		host = "127.0.0.1"
	}
	if _, _, err := net.SplitHostPort(host); err != nil {
		return net.JoinHostPort(host, port)
	}
	return host
}

// args returns the fixture flags that put an instance on the store
// through the proxy at addr.
func (s *sharedStore) args(addr string) []string {
	c := s.c
	var a []string
	switch c.store {
	case "redis":
		u, _ := url.Parse(c.redisURL)
		u.Host = addr
		a = []string{"-store", "redis", "-redis-url", u.String(), "-redis-prefix", s.prefix}
	case "postgres":
		u, _ := url.Parse(c.postgresURL)
		u.Host = addr
		a = []string{"-store", "postgres", "-postgres-url", u.String(), "-pg-table", s.table}
	case "mysql":
		cfg, _ := mysql.ParseDSN(c.mysqlDSN)
		cfg.Addr = addr
		a = []string{"-store", "mysql", "-mysql-dsn", cfg.FormatDSN(), "-mysql-table", s.table}
	}
	if c.exactlyOnce {
		a = append(a, "-exactly-once", "-exec-table", s.execTable)
	}
	return a
}

// describe names the store for the header.
func (s *sharedStore) describe() string {
	mode := "plain"
	if s.c.exactlyOnce {
		mode = "exactly-once"
	}
	where := "table " + s.table
	if s.c.store == "redis" {
		where = "prefix " + s.prefix
	}
	return fmt.Sprintf("%s at %s (%s, %s)", s.c.store, s.target, mode, where)
}

// committed reads the executions table, straight from the server.
func (s *sharedStore) committed(ctx context.Context) ([]execution, error) {
	var out []execution
	switch s.c.store {
	case "postgres":
		conn, err := pgx.Connect(ctx, s.c.postgresURL)
		if err != nil {
			return nil, err
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, `SELECT idem_key, exec_id, pid, arrived, started, recorded FROM `+s.execTable)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var x execution
			if err := rows.Scan(&x.Key, &x.Exec, &x.PID, &x.Arrived, &x.Started, &x.At); err != nil {
				return nil, err
			}
			out = append(out, x)
		}
		return out, rows.Err()
	case "mysql":
		db, err := sql.Open("mysql", s.c.mysqlDSN)
		if err != nil {
			return nil, err
		}
		defer db.Close()
		rows, err := db.QueryContext(ctx, "SELECT idem_key, exec_id, pid, arrived, started, recorded FROM `"+s.execTable+"`")
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var x execution
			if err := rows.Scan(&x.Key, &x.Exec, &x.PID, &x.Arrived, &x.Started, &x.At); err != nil {
				return nil, err
			}
			out = append(out, x)
		}
		return out, rows.Err()
	}
	return nil, fmt.Errorf("%s has no executions table", s.c.store)
}

// cleanup drops the run's tables, or deletes its Redis keys.
func (s *sharedStore) cleanup(ctx context.Context) error {
	switch s.c.store {
	case "redis":
		opt, err := redis.ParseURL(s.c.redisURL)
		if err != nil {
			return err
		}
		client := redis.NewClient(opt)
		defer client.Close()
		iter := client.Scan(ctx, 0, s.prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := client.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	case "postgres":
		conn, err := pgx.Connect(ctx, s.c.postgresURL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		q := `DROP TABLE IF EXISTS ` + s.table
		if s.execTable != "" {
			q += ", " + s.execTable
		}
		_, err = conn.Exec(ctx, q)
		return err
	case "mysql":
		db, err := sql.Open("mysql", s.c.mysqlDSN)
		if err != nil {
			return err
		}
		defer db.Close()
		q := "DROP TABLE IF EXISTS `" + s.table + "`"
		if s.execTable != "" {
			q += ", `" + s.execTable + "`"
		}
		_, err = db.ExecContext(ctx, q)
		return err
	}
	return nil
}
