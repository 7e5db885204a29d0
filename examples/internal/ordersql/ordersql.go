// Package ordersql keeps the examples' orders and payments in PostgreSQL,
// MySQL or SQLite, written through the request's transaction in
// exactly-once mode (pgxstore.Tx, mysqlstore.Tx, sqlitestore.Tx): an order and the stored answer that
// reports it commit together or not at all. Outside a keyed request
// (reads) it uses the pool.
package ordersql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/examples/internal/orders"
	mysqlstore "github.com/idemkit/idem/stores/mysql"
	pgxstore "github.com/idemkit/idem/stores/pgx"
	sqlitestore "github.com/idemkit/idem/stores/sqlite"
)

// Postgres is an orders.Repo on PostgreSQL tables PREFIX_orders and
// PREFIX_payments.
type Postgres struct {
	pool             *pgxpool.Pool
	orders, payments string
}

// NewPostgres returns a Postgres on pool, creating its tables when they
// do not exist. prefix must be a plain SQL identifier.
func NewPostgres(ctx context.Context, pool *pgxpool.Pool, prefix string) (*Postgres, error) {
	p := &Postgres{pool: pool, orders: prefix + "_orders", payments: prefix + "_payments"}
	_, err := pool.Exec(ctx, fmt.Sprintf(`
CREATE TABLE IF NOT EXISTS %s (id bigserial PRIMARY KEY, item text NOT NULL, quantity int NOT NULL, created_at timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS %s (id bigserial PRIMARY KEY, order_id bigint NOT NULL REFERENCES %s (id), amount double precision NOT NULL, created_at timestamptz NOT NULL)`,
		p.orders, p.payments, p.orders))
	if err != nil {
		return nil, fmt.Errorf("creating tables %s and %s: %w", p.orders, p.payments, err)
	}
	return p, nil
}

// Tables names the Postgres's tables.
func (p *Postgres) Tables() (orders, payments string) { return p.orders, p.payments }

type pgDB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// db is the request's transaction when there is one, else the pool.
func (p *Postgres) db(ctx context.Context) pgDB {
	if tx, ok := pgxstore.Tx(ctx); ok {
		return tx
	}
	return p.pool
}

func (p *Postgres) CreateOrder(ctx context.Context, item string, quantity int, now time.Time) (orders.Order, error) {
	var id int64
	err := p.db(ctx).QueryRow(ctx, "INSERT INTO "+p.orders+" (item, quantity, created_at) VALUES ($1, $2, $3) RETURNING id", item, quantity, now).Scan(&id)
	return orders.Order{ID: "ord_" + strconv.FormatInt(id, 10), Item: item, Quantity: quantity, CreatedAt: now}, err
}

func (p *Postgres) ListOrders(ctx context.Context) ([]orders.Order, error) {
	rows, err := p.db(ctx).Query(ctx, "SELECT id, item, quantity, created_at FROM "+p.orders+" ORDER BY id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []orders.Order{}
	for rows.Next() {
		var o orders.Order
		var id int64
		if err := rows.Scan(&id, &o.Item, &o.Quantity, &o.CreatedAt); err != nil {
			return nil, err
		}
		o.ID, o.CreatedAt = "ord_"+strconv.FormatInt(id, 10), o.CreatedAt.UTC()
		out = append(out, o)
	}
	return out, rows.Err()
}

func (p *Postgres) GetOrder(ctx context.Context, id string) (orders.Order, error) {
	n, ok := parseID(id)
	if !ok {
		return orders.Order{}, orders.ErrNotFound
	}
	o := orders.Order{ID: id}
	err := p.db(ctx).QueryRow(ctx, "SELECT item, quantity, created_at FROM "+p.orders+" WHERE id = $1", n).Scan(&o.Item, &o.Quantity, &o.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return orders.Order{}, orders.ErrNotFound
	}
	o.CreatedAt = o.CreatedAt.UTC()
	return o, err
}

func (p *Postgres) AddPayment(ctx context.Context, orderID string, amount float64, now time.Time) (orders.Payment, error) {
	n, ok := parseID(orderID)
	if !ok {
		return orders.Payment{}, orders.ErrNotFound
	}
	db := p.db(ctx)
	// Look first rather than let the foreign key fail: a failed statement
	// aborts the request's transaction, and the 404 could not commit.
	// FOR SHARE keeps the order until the payment commits.
	var one int
	err := db.QueryRow(ctx, "SELECT 1 FROM "+p.orders+" WHERE id = $1 FOR SHARE", n).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return orders.Payment{}, orders.ErrNotFound
	}
	if err != nil {
		return orders.Payment{}, err
	}
	var id int64
	err = db.QueryRow(ctx, "INSERT INTO "+p.payments+" (order_id, amount, created_at) VALUES ($1, $2, $3) RETURNING id", n, amount, now).Scan(&id)
	return orders.Payment{ID: "pay_" + strconv.FormatInt(id, 10), OrderID: orderID, Amount: amount, CreatedAt: now}, err
}

// SQL is an orders.Repo on MySQL or SQLite tables PREFIX_orders and
// PREFIX_payments (database/sql).
type SQL struct {
	db               *sql.DB
	tx               func(context.Context) *sql.Tx // the request's, or nil
	lock             string                        // locks the order a payment names
	orders, payments string
}

// NewMySQL returns a SQL on MySQL db, writing through mysqlstore.Tx, and
// creates its tables when they do not exist. prefix must be a plain SQL
// identifier.
func NewMySQL(ctx context.Context, db *sql.DB, prefix string) (*SQL, error) {
	m := &SQL{db: db, tx: mysqlstore.Tx, lock: " FOR UPDATE", orders: prefix + "_orders", payments: prefix + "_payments"}
	return m, m.create(ctx,
		"CREATE TABLE IF NOT EXISTS "+m.orders+" (id BIGINT AUTO_INCREMENT PRIMARY KEY, item VARCHAR(255) NOT NULL, quantity INT NOT NULL, created_us BIGINT NOT NULL) ENGINE=InnoDB",
		"CREATE TABLE IF NOT EXISTS "+m.payments+" (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_id BIGINT NOT NULL, amount DOUBLE NOT NULL, created_us BIGINT NOT NULL, FOREIGN KEY (order_id) REFERENCES "+m.orders+" (id)) ENGINE=InnoDB")
}

// NewSQLite returns a SQL on SQLite db, writing through sqlitestore.Tx,
// and creates its tables when they do not exist. SQLite has one writer,
// so nothing needs locking.
func NewSQLite(ctx context.Context, db *sql.DB, prefix string) (*SQL, error) {
	tx := func(ctx context.Context) *sql.Tx {
		t, _ := sqlitestore.Tx(ctx)
		return t
	}
	m := &SQL{db: db, tx: tx, orders: prefix + "_orders", payments: prefix + "_payments"}
	return m, m.create(ctx,
		"CREATE TABLE IF NOT EXISTS "+m.orders+" (id INTEGER PRIMARY KEY AUTOINCREMENT, item TEXT NOT NULL, quantity INTEGER NOT NULL, created_us INTEGER NOT NULL)",
		"CREATE TABLE IF NOT EXISTS "+m.payments+" (id INTEGER PRIMARY KEY AUTOINCREMENT, order_id INTEGER NOT NULL REFERENCES "+m.orders+" (id), amount REAL NOT NULL, created_us INTEGER NOT NULL)")
}

func (m *SQL) create(ctx context.Context, ddl ...string) error {
	for _, q := range ddl {
		if _, err := m.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("creating tables %s and %s: %w", m.orders, m.payments, err)
		}
	}
	return nil
}

// Tables names the SQL's tables.
func (m *SQL) Tables() (orders, payments string) { return m.orders, m.payments }

type sqlDB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// conn is the request's transaction when there is one, else the pool.
func (m *SQL) conn(ctx context.Context) sqlDB {
	if tx := m.tx(ctx); tx != nil {
		return tx
	}
	return m.db
}

func (m *SQL) CreateOrder(ctx context.Context, item string, quantity int, now time.Time) (orders.Order, error) {
	res, err := m.conn(ctx).ExecContext(ctx, "INSERT INTO "+m.orders+" (item, quantity, created_us) VALUES (?, ?, ?)", item, quantity, now.UnixMicro())
	if err != nil {
		return orders.Order{}, err
	}
	id, err := res.LastInsertId()
	return orders.Order{ID: "ord_" + strconv.FormatInt(id, 10), Item: item, Quantity: quantity, CreatedAt: now}, err
}

func (m *SQL) ListOrders(ctx context.Context) ([]orders.Order, error) {
	rows, err := m.conn(ctx).QueryContext(ctx, "SELECT id, item, quantity, created_us FROM "+m.orders+" ORDER BY id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []orders.Order{}
	for rows.Next() {
		var o orders.Order
		var id, us int64
		if err := rows.Scan(&id, &o.Item, &o.Quantity, &us); err != nil {
			return nil, err
		}
		o.ID, o.CreatedAt = "ord_"+strconv.FormatInt(id, 10), time.UnixMicro(us).UTC()
		out = append(out, o)
	}
	return out, rows.Err()
}

func (m *SQL) GetOrder(ctx context.Context, id string) (orders.Order, error) {
	n, ok := parseID(id)
	if !ok {
		return orders.Order{}, orders.ErrNotFound
	}
	o := orders.Order{ID: id}
	var us int64
	err := m.conn(ctx).QueryRowContext(ctx, "SELECT item, quantity, created_us FROM "+m.orders+" WHERE id = ?", n).Scan(&o.Item, &o.Quantity, &us)
	if errors.Is(err, sql.ErrNoRows) {
		return orders.Order{}, orders.ErrNotFound
	}
	o.CreatedAt = time.UnixMicro(us).UTC()
	return o, err
}

func (m *SQL) AddPayment(ctx context.Context, orderID string, amount float64, now time.Time) (orders.Payment, error) {
	n, ok := parseID(orderID)
	if !ok {
		return orders.Payment{}, orders.ErrNotFound
	}
	db := m.conn(ctx)
	var one int
	// The order row is locked until the payment commits, so it cannot
	// vanish under it.
	err := db.QueryRowContext(ctx, "SELECT 1 FROM "+m.orders+" WHERE id = ?"+m.lock, n).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return orders.Payment{}, orders.ErrNotFound
	}
	if err != nil {
		return orders.Payment{}, err
	}
	res, err := db.ExecContext(ctx, "INSERT INTO "+m.payments+" (order_id, amount, created_us) VALUES (?, ?, ?)", n, amount, now.UnixMicro())
	if err != nil {
		return orders.Payment{}, err
	}
	id, err := res.LastInsertId()
	return orders.Payment{ID: "pay_" + strconv.FormatInt(id, 10), OrderID: orderID, Amount: amount, CreatedAt: now}, err
}

// parseID reads the number of an "ord_N" id.
func parseID(id string) (int64, bool) {
	s, ok := strings.CutPrefix(id, "ord_")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0
}
