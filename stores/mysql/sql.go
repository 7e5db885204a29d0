package mysqlstore

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"sync"

	"github.com/idemkit/idem/core/store"
	"github.com/idemkit/idem/stores/sqlbase"
)

// The store's SQL. Most statements are templates compiled once, in New:
// {{t}} is the backquoted table name and :name marks a value. Values are
// written into the statement as literals, never interpolated as text:
// bytes and strings as hexadecimal literals (X'6b31'), integers in
// decimal, nil as NULL. Only hex digits and decimal digits ever reach the
// SQL, so no value can change a statement's meaning whatever the
// connection's character set, SQL mode or driver settings, and each such
// statement is one COM_QUERY: one round trip, no server-side prepared
// statement.
//
// The two statements that carry a result (completeSQL and commitSQL)
// are server-side prepared statements instead, with ? placeholders: the
// body and head travel as binary parameters, byte for byte, rather
// than as hex literals twice their size, so that a result as large as
// max_allowed_packet allows fits (see Store.MaxResponseSize). The driver
// sends a large parameter in COM_STMT_SEND_LONG_DATA packets whatever the
// DSN says (interpolateParams applies to unprepared statements only).
// recordCols are the columns every read returns, in scan order.
const recordCols = sqlbase.RecordColumns

// selectSQL is the claim's first statement: a plain SELECT by primary
// key. Run on its own (autocommit) it is a consistent non-locking read
// under READ COMMITTED, REPEATABLE READ and SERIALIZABLE alike: it takes
// no lock, waits for none and writes nothing. A replay, a 409 and a 422
// are this statement alone.
const selectSQL = "SELECT " + recordCols + " FROM {{t}} WHERE scope = :scope AND `key` = :key"

// takeSQL is the claim's second statement, run only when selectSQL found
// no row or a takeable one: it inserts the claim, or takes an expired or
// abandoned row over, or leaves a live row alone.
//
// On a duplicate key InnoDB locks the existing row exclusively before it
// evaluates the UPDATE clause, on the newest committed version of the row,
// so of two takers only the first takes the row over; the second then
// sees a live row and changes nothing. A plain INSERT would take a shared
// lock for its duplicate check instead, and two of them racing for a key
// whose row was just deleted (released, swept) deadlock upgrading it.
//
// The first assignment evaluates the takeover condition once and stores
// 2 (take) or 1 (leave) with LAST_INSERT_ID(expr); the others read it
// back with LAST_INSERT_ID(). The server reports the value in the OK
// packet's insert id: 0 when the row was inserted (the UPDATE clause never
// ran), 2 when it was taken over, 1 when a live row was left alone. That
// tells the outcomes apart whatever CLIENT_FOUND_ROWS makes of the
// affected-rows count. The values are repeated rather than read with
// VALUES(col), which MySQL 8.0.20 deprecates.
const takeSQL = "INSERT INTO {{t}} (scope, `key`, fingerprint, token, state, status, headers, body, body_omitted, created_at, lease_end, expires_at)\n" +
	"VALUES (:scope, :key, :fp, :token, 1, NULL, NULL, NULL, FALSE, :now, :lease, :lease)\n" + takeUpdate

// takeUpdate is the UPDATE clause of takeSQL and takeTxSQL: it takes an
// expired or abandoned row over, with the transaction's mark (:mark, NULL
// for takeSQL), or leaves a live row alone.
const takeUpdate = "ON DUPLICATE KEY UPDATE\n" +
	"    fingerprint  = IF(LAST_INSERT_ID(IF(expires_at <= :now OR (state = 1 AND lease_end <= :now), 2, 1)) = 2, :fp, fingerprint),\n" +
	"    token        = IF(LAST_INSERT_ID() = 2, :token, token),\n" +
	"    state        = IF(LAST_INSERT_ID() = 2, 1, state),\n" +
	"    status       = IF(LAST_INSERT_ID() = 2, NULL, status),\n" +
	"    headers      = IF(LAST_INSERT_ID() = 2, NULL, headers),\n" +
	"    body         = IF(LAST_INSERT_ID() = 2, NULL, body),\n" +
	"    body_omitted = IF(LAST_INSERT_ID() = 2, FALSE, body_omitted),\n" +
	"    created_at   = IF(LAST_INSERT_ID() = 2, :now, created_at),\n" +
	"    lease_end    = IF(LAST_INSERT_ID() = 2, :lease, lease_end),\n" +
	"    expires_at   = IF(LAST_INSERT_ID() = 2, :lease, expires_at),\n" +
	"    tx_mark      = IF(LAST_INSERT_ID() = 2, :mark, tx_mark)"

// The insert ids takeSQL reports.
const (
	takeInserted = 0
	takeLeft     = 1
	takeTaken    = 2
)

// completeSQL turns a held claim into a completed record. It is a
// prepared statement; its parameters are the result's head (kept in the
// headers column), body, body_omitted, expires_at, scope, key and token.
// The status column is NULL in every row it writes: a completed row with
// a status was written before results were opaque, and its head is
// rebuilt from the status and the headers column when it is read
// (sqlbase.Row.Record). Setting state from 1 to
// 2 always changes the row, so the affected-rows count is 1 exactly when
// the claim was held, with or without CLIENT_FOUND_ROWS. The lease end is
// not checked: a claim nobody took over is its token's until then.
//
// The values compared with binary columns are CAST to binary: the driver
// types []byte parameters as strings in the connection's character set,
// and a binary comparison both compares bytes and lets the primary key
// serve the lookup. The values stored into BLOB columns are assigned as
// they are, which stores their bytes unchanged.
const completeSQL = "UPDATE {{t}} SET state = 2, status = NULL, headers = ?, body = ?, body_omitted = ?,\n" +
	"    lease_end = NULL, expires_at = ?, tx_mark = NULL\n" +
	"WHERE scope = CAST(? AS BINARY) AND `key` = CAST(? AS BINARY) AND token = CAST(? AS BINARY) AND state = 1"

// commitSQL is completeSQL inside an exactly-once transaction: it also
// requires the transaction's mark (its last parameter), which markSQL
// wrote when the transaction began. If the server rolled the transaction
// back (a deadlock), the mark went with it and this matches nothing.
const commitSQL = completeSQL + " AND tx_mark = CAST(? AS BINARY)"

// markSQL is an exactly-once transaction's first statement: it checks
// that the claim is still held and writes the transaction's mark, which
// also takes the row's lock until the transaction ends, so that nothing
// else changes the record meanwhile.
const markSQL = "UPDATE {{t}} SET tx_mark = :mark WHERE scope = :scope AND `key` = :key AND token = :token AND state = 1"

// holderSQL reads what a failed commit needs to tell a lost claim from a
// transaction the server rolled back.
const holderSQL = "SELECT token, state, tx_mark FROM {{t}} WHERE scope = :scope AND `key` = :key"

// holdName is the name of the user-level lock (GET_LOCK) an exactly-once
// transaction holds while it lives, for the record of :scope and :key in
// this table of this database: the SHA-1 of the database's name, the
// table's and the SHA-1s of the scope and key, so that it is at most 45
// characters (the limit is 64) and names differ wherever records do.
const holdName = "CONCAT('idem.', SHA1(CONCAT_WS(X'00', IFNULL(DATABASE(), ''), :table, SHA1(:scope), SHA1(:key))))"

// holdSQL starts an exactly-once transaction's session: autocommit off,
// so that a statement the handler runs after the server rolled its
// transaction back opens a new transaction (which the failed commit rolls
// back) instead of committing on its own; and the user-level lock that
// tells other requests' claims the record is held (heldSQL, claimReadSQL).
// GET_LOCK with a timeout of 0 never waits. Should another session still
// hold the name, BeginTx goes on with the row lock alone (the claim is
// committed, and the holder is ending, racing), while ClaimTx claims
// nothing (takeTxSQL) and answers with what the holder shows. unholdSQL
// ends it, after COMMIT or ROLLBACK.
const holdSQL = "SET autocommit = 0, @idem_hold = GET_LOCK(" + holdName + ", 0)"

// unholdSQL restores the session for the pool.
const unholdSQL = "SET autocommit = 1, @idem_hold = RELEASE_LOCK(" + holdName + ")"

// heldSQL reports whether a live exactly-once transaction holds the
// record: IS_USED_LOCK reads the lock table and never waits. A claim asks
// it before taking over an in-progress record whose lease has ended, so
// that it answers with the record at once instead of waiting for the
// transaction's row lock.
const heldSQL = "SELECT IS_USED_LOCK(" + holdName + ") IS NOT NULL"

// extendSQL moves a held claim's lease. The new lease end may equal the
// old one, which changes nothing, so a matched row is marked with
// LAST_INSERT_ID(1) (state stays 1) and told apart by the insert id. As
// for completeSQL, the old lease end is not checked.
const extendSQL = "UPDATE {{t}} SET lease_end = :lease, expires_at = :lease, state = LAST_INSERT_ID(1)\n" +
	"WHERE scope = :scope AND `key` = :key AND token = :token AND state = 1"

// holdingSQL finds, with a consistent read that takes no lock and waits
// for none, which of the claims in :holds (holdList: an OR of primary-key
// equalities with the token, which the optimizer reads as ranges of the
// primary key even on a small table, where a row-constructor IN is a scan)
// still hold their records in progress. extendBatchSQL then moves the
// lease of those to :lease, locking their rows alone: a claim taken over
// since by an exactly-once transaction, whose row lock would hold any
// locking read of its row for as long as its handler runs, is left out.
const holdingSQL = "SELECT scope, `key`, token FROM {{t}} WHERE state = 1 AND (:holds)"

const extendBatchSQL = "UPDATE {{t}} SET lease_end = :lease, expires_at = :lease WHERE state = 1 AND (:holds)"

// releaseSQL deletes a held, in-progress claim.
const releaseSQL = "DELETE FROM {{t}} WHERE scope = :scope AND `key` = :key AND token = :token AND state = 1"

// deleteSQL evicts a record whatever its state.
const deleteSQL = "DELETE FROM {{t}} WHERE scope = :scope AND `key` = :key"

// evictSQL deletes a record whatever its state, while it holds :token.
const evictSQL = "DELETE FROM {{t}} WHERE scope = :scope AND `key` = :key AND token = :token"

// clockSQL reads the server's time in microseconds since the Unix epoch.
// UTC_TIMESTAMP(6) is the statement's start, microseconds after the
// server received it and within the round trip whose midpoint the engine
// takes; it needs no time-zone conversion (SYSDATE(6), the call time, is
// in the session's time zone, and converting it back to UTC is ambiguous
// in the hour a daylight-saving zone falls back), and --sysdate-is-now
// does not change it. TIMESTAMPDIFF from the epoch is plain arithmetic on
// two DATETIME values.
const clockSQL = "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"

// getSQL reads a record that has not expired at :now.
const getSQL = "SELECT " + recordCols + " FROM {{t}} WHERE scope = :scope AND `key` = :key AND expires_at > :now"

// removable is the condition under which DeleteExpired removes a row at
// :now: a completed record from its expiry; an in-progress one only a
// lease later, at lease_end + (lease_end - created_at), so that a late
// Complete, Extend or Release of a claim nobody took over still finds it.
const removable = "(state = 2 AND expires_at <= :now OR state = 1 AND lease_end + (lease_end - created_at) <= :now)"

// expiredSQL finds a batch of removable rows with a consistent read of
// the expires_at index (every removable row has expired): no lock is
// taken. sweepLockSQL and sweepDeleteSQL then delete them by primary key.
const expiredSQL = "SELECT scope, `key` FROM {{t}} WHERE expires_at <= :now AND " + removable + " ORDER BY expires_at LIMIT :limit"

// sweepLockSQL, inside a short transaction, locks the listed rows that
// are still removable, skipping rows another transaction holds locked (a
// live exactly-once transaction, or a claim taking the row over): the
// sweeper never waits for a lock, so it never holds the rest of its batch
// while waiting. "expires_at + 0" keeps the optimizer off the expires_at
// index (removable's "expires_at <=" would be a range on it), so the rows
// are found and locked through the primary key, as a claim locks them.
// sweepDeleteSQL then deletes the rows it locked.
const sweepLockSQL = "SELECT scope, `key` FROM {{t}} WHERE (scope, `key`) IN (:in)\n" +
	"    AND (state = 2 AND expires_at + 0 <= :now OR state = 1 AND lease_end + (lease_end - created_at) <= :now)\n" +
	"FOR UPDATE SKIP LOCKED"

// sweepDeleteSQL deletes rows the sweeper's transaction locked. The ORDER
// BY and LIMIT change nothing but satisfy sql_safe_updates and
// statement-based binary logging.
const sweepDeleteSQL = "DELETE FROM {{t}} WHERE (scope, `key`) IN (:in) ORDER BY scope, `key` LIMIT :limit"

// watchSQL reads the state of the watched keys listed in :in.
const watchSQL = "SELECT scope, `key`, token, state FROM {{t}} WHERE (scope, `key`) IN (:in)"

// queries holds the store's statements for one table.
type queries struct {
	selectRecord, take, extend, release, delete, evict, get stmt
	holding, extendBatch                                    stmt
	mark, holder, hold, unhold, held                        stmt
	claimRead, takeTx, dirty, isHeld, owns                  stmt
	expired, sweepLock, sweepDelete, watch                  stmt
	complete, commit                                        string // prepared: ? placeholders
}

func newQueries(table string) queries {
	t := quoteIdent(table)
	return queries{
		selectRecord: compile(selectSQL, t, "scope", "key"),
		take:         compile(takeSQL, t, "scope", "key", "fp", "token", "now", "lease", "mark"),
		extend:       compile(extendSQL, t, "scope", "key", "token", "lease"),
		release:      compile(releaseSQL, t, "scope", "key", "token"),
		extendBatch:  compile(extendBatchSQL, t, "lease", "holds"),
		holding:      compile(holdingSQL, t, "holds"),
		delete:       compile(deleteSQL, t, "scope", "key"),
		evict:        compile(evictSQL, t, "scope", "key", "token"),
		get:          compile(getSQL, t, "scope", "key", "now"),
		mark:         compile(markSQL, t, "scope", "key", "token", "mark"),
		holder:       compile(holderSQL, t, "scope", "key"),
		hold:         compile(holdSQL, t, "table", "scope", "key"),
		unhold:       compile(unholdSQL, t, "table", "scope", "key"),
		held:         compile(heldSQL, t, "table", "scope", "key"),
		claimRead:    compile(claimReadSQL, t, "table", "scope", "key"),
		takeTx:       compile(takeTxSQL, t, "scope", "key", "fp", "token", "now", "lease", "mark"),
		dirty:        compile(dirtySQL, t, "scope", "key"),
		owns:         compile(ownsSQL, t, "table", "scope", "key"),
		isHeld:       compile("IS_USED_LOCK("+holdName+") IS NOT NULL", t, "table", "scope", "key"),
		expired:      compile(expiredSQL, t, "now", "limit"),
		sweepLock:    compile(sweepLockSQL, t, "in", "now"),
		sweepDelete:  compile(sweepDeleteSQL, t, "in", "limit"),
		watch:        compile(watchSQL, t, "in"),
		complete:     strings.ReplaceAll(completeSQL, "{{t}}", t),
		commit:       strings.ReplaceAll(commitSQL, "{{t}}", t),
	}
}

// quoteIdent backquotes a name that validTable has accepted.
func quoteIdent(name string) string { return "`" + name + "`" }

// stmt is a compiled template: text[0], value, text[1], value, ...
type stmt struct {
	text []string
	arg  []int // per placeholder, the index of its value in render's vals
	size int
}

// compile splits tmpl at its :name placeholders; names gives the order in
// which render takes the values. It panics on an unknown name: templates
// are constants of this package.
func compile(tmpl, table string, names ...string) stmt {
	tmpl = strings.ReplaceAll(tmpl, "{{t}}", table)
	var s stmt
	for {
		i := strings.IndexByte(tmpl, ':')
		if i < 0 {
			break
		}
		j := i + 1
		for j < len(tmpl) && (tmpl[j] >= 'a' && tmpl[j] <= 'z' || tmpl[j] == '_') {
			j++
		}
		idx := -1
		for k, n := range names {
			if n == tmpl[i+1:j] {
				idx = k
			}
		}
		if idx < 0 {
			panic("mysqlstore: unknown placeholder " + tmpl[i:j])
		}
		s.text = append(s.text, tmpl[:i])
		s.arg = append(s.arg, idx)
		tmpl = tmpl[j:]
	}
	s.text = append(s.text, tmpl)
	for _, t := range s.text {
		s.size += len(t)
	}
	return s
}

// render returns the statement with vals in place. A value is a string
// or []byte (written as X'hex'), an int or int64, a bool, nil (NULL), or
// a literal (already SQL, made by this package: an IN list).
func (s stmt) render(vals ...any) string {
	n := s.size
	for _, i := range s.arg {
		n += litLen(vals[i])
	}
	b := make([]byte, 0, n)
	for k, i := range s.arg {
		b = append(b, s.text[k]...)
		b = appendLit(b, vals[i])
	}
	b = append(b, s.text[len(s.text)-1]...)
	return string(b)
}

// literal is SQL text this package built from values, such as a list of
// (scope, key) pairs; render copies it as it is.
type literal string

func litLen(v any) int {
	switch v := v.(type) {
	case string:
		return 3 + 2*len(v)
	case []byte:
		if v == nil {
			return 4
		}
		return 3 + 2*len(v)
	case literal:
		return len(v)
	}
	return 20
}

const hexDigits = "0123456789abcdef"

func appendLit(b []byte, v any) []byte {
	switch v := v.(type) {
	case string:
		b = append(b, "X'"...)
		for i := 0; i < len(v); i++ {
			b = append(b, hexDigits[v[i]>>4], hexDigits[v[i]&0xf])
		}
		return append(b, '\'')
	case []byte:
		if v == nil {
			return append(b, "NULL"...)
		}
		b = append(b, "X'"...)
		for _, c := range v {
			b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
		}
		return append(b, '\'')
	case int64:
		return strconv.AppendInt(b, v, 10)
	case int:
		return strconv.AppendInt(b, int64(v), 10)
	case bool:
		if v {
			return append(b, "TRUE"...)
		}
		return append(b, "FALSE"...)
	case nil:
		return append(b, "NULL"...)
	case literal:
		return append(b, v...)
	}
	panic("mysqlstore: no literal for a value of this type")
}

// pairList returns the literal list "(X'..', X'..'), ..." for an IN
// clause over (scope, key).
func pairList(scopes, keys []string) literal {
	n := 0
	for i := range scopes {
		n += 2*len(scopes[i]) + 2*len(keys[i]) + 14
	}
	b := make([]byte, 0, n)
	for i := range scopes {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '(')
		b = appendLit(b, scopes[i])
		b = append(b, ", "...)
		b = appendLit(b, keys[i])
		b = append(b, ')')
	}
	return literal(b)
}

// holdList renders holds (their scopes as stored) as an OR of
// "(scope = .. AND `key` = .. AND token = ..)".
func holdList(hs []store.Hold) literal {
	var b []byte
	for i, h := range hs {
		if i > 0 {
			b = append(b, " OR "...)
		}
		b = append(b, "(scope = "...)
		b = appendLit(b, h.Scope)
		b = append(b, " AND `key` = "...)
		b = appendLit(b, h.Key)
		b = append(b, " AND token = "...)
		b = appendLit(b, h.Token)
		b = append(b, ')')
	}
	return literal(b)
}

// lazyStmt is a server-side prepared statement on the store's pool,
// prepared at its first use (the table may not exist when New runs) and
// then on each connection that runs it, by database/sql.
type lazyStmt struct {
	query  string
	mu     sync.Mutex
	st     *sql.Stmt
	closed bool
}

// get returns the statement, preparing it on first use; done releases
// it. Preparing takes a connection from db's pool, so a caller that holds
// one (a transaction) must have called get before taking it, or a pool
// that its transactions fill would never give one. After close, get
// prepares a statement for this call only, which done closes.
func (l *lazyStmt) get(ctx context.Context, db *sql.DB) (st *sql.Stmt, done func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st != nil {
		return l.st, func() {}, nil
	}
	st, err = db.PrepareContext(ctx, l.query)
	if err != nil {
		return nil, nil, err
	}
	if l.closed {
		return st, func() { st.Close() }, nil
	}
	l.st = st
	return st, func() {}, nil
}

// close closes the statement on every connection it was prepared on.
func (l *lazyStmt) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.st != nil {
		l.st.Close()
		l.st = nil
	}
}
