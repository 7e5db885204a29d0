package mysqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/idemkit/idem/stores/sqlbase"
)

// An exactly-once engine claims inside the request's transaction
// (store.TxClaimer): the claim's row is inserted in the transaction that
// later holds the handler's writes and commits with the completed record,
// so that a first request costs InnoDB one durable commit, not two (the
// claim's own, then the transaction's). Until that commit the claim is
// uncommitted, and a consistent read does not see it; other requests learn
// of it from the user-level lock the transaction holds (holdName), and
// read its fingerprint with a read that sees uncommitted rows (dirtySQL).

// claimReadSQL is the exactly-once Get's statement: the record as
// committed, as selectSQL reads it (no lock taken, none waited for), and
// whether a session holds the record's user-level lock, which an
// exactly-once transaction does for as long as it lives: the one way to
// tell a claim still uncommitted in another session from a free key
// without writing. The derived table gives the row to join: the result
// has one row whether or not the record exists. It costs about half
// again as much as selectSQL, so claims, which learn of the lock from
// their write, read with selectSQL, and a replay stays that one statement.
var claimReadSQL = "SELECT IS_USED_LOCK(" + holdName + ") IS NOT NULL, r." +
	strings.ReplaceAll(recordCols, ", ", ", r.") +
	" FROM (SELECT 1 AS one) AS o LEFT JOIN {{t}} AS r ON r.scope = :scope AND r.`key` = :key"

// takeTxSQL is takeSQL inside the claiming transaction, after holdSQL: it
// also writes the transaction's mark (markSQL's, in the same statement),
// and inserts only when holdSQL got the user-level lock (@idem_hold = 1).
// Without the lock it changes nothing and reports insert id 0 with no row
// affected: another session's transaction holds the record, and the
// claim answers with what that transaction is doing instead of waiting
// for its row lock. The insert ids are takeSQL's.
const takeTxSQL = "INSERT INTO {{t}} (scope, `key`, fingerprint, token, state, status, headers, body, body_omitted, created_at, lease_end, expires_at, tx_mark)\n" +
	"SELECT :scope, :key, :fp, :token, 1, NULL, NULL, NULL, FALSE, :now, :lease, :lease, :mark FROM DUAL WHERE @idem_hold = 1\n" + takeUpdate

// dirtyLevelSQL sets the isolation level of the session's next
// transaction alone: in autocommit mode, its next statement. dirtySQL
// (selectSQL) then reads the record as it stands, a claim another
// transaction has not committed yet included.
const dirtyLevelSQL = "SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED"

// ClaimTx implements store.TxClaimer: it claims c's key inside a new
// transaction, which it returns with the claim when it acquires it.
// It reads the record first, with Claim's primary-key SELECT: a replay,
// a mismatch or a committed claim in progress is that one statement.
// Otherwise, on a pooled connection of its own:
//
//	SET autocommit = 0, @idem_hold = GET_LOCK(<name of the record>, 0)
//	[SET TRANSACTION ISOLATION LEVEL ...]    -- unless WithTxOptions gave none
//	START TRANSACTION
//	INSERT ... SELECT ... WHERE @idem_hold = 1 ON DUPLICATE KEY UPDATE ...   -- the claim, as Claim's
//
// The transaction then holds the claim as BeginTx's does (its row lock
// and the user-level lock); the handler's writes, made through Tx, and
// the completed record commit with the claim, in one durable commit.
// Until then the claim is not committed, and the SELECT does not see it:
// another ClaimTx finds the lock held, claims nothing, rolls back, and
// reads the record with READ UNCOMMITTED (dirty), so it answers with the
// claim's fingerprint (409 or 422) at once. One that finds the lock held
// but no record yet (the holder is between the lock and its INSERT, or
// ending) tries again, up to maxClaimAttempts times, and then answers
// with an in-progress record of its own fingerprint (409).
//
// When the transaction ends without a commit (Rollback, the server's
// rollback, a lost connection, a crash) the claim goes with it and the
// key is free at once. ctx bounds only the claim; the transaction
// outlives it.
func (s *ExactlyOnceStore) ClaimTx(ctx context.Context, c store.Claim) (store.ClaimResult, store.Tx, error) {
	res, t, err := s.claim(ctx, c, true)
	if t == nil {
		return res, nil, err
	}
	return res, t, err
}

// Claim implements store.Store as Store.Claim does, committing the claim
// on its own, and sees claims not yet committed (ClaimTx's) as ClaimTx
// does: it answers with them in progress instead of waiting for their row
// lock. It claims as ClaimTx does, under the record's user-level lock,
// and commits the claim at once: a plain INSERT, without the lock, could
// wait for the row lock of a claim made meanwhile in a transaction, for as
// long as that one's handler runs, and land after it.
func (s *ExactlyOnceStore) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	res, _, err := s.claim(ctx, c, false)
	return res, err
}

// claim is ClaimTx (inTx) and Claim.
func (s *ExactlyOnceStore) claim(ctx context.Context, c store.Claim, inTx bool) (store.ClaimResult, *txn, error) {
	if err := checkLen("key", c.Key, maxKey); err != nil {
		return store.ClaimResult{}, nil, err
	}
	if err := checkLen("token", c.Token, maxToken); err != nil {
		return store.ClaimResult{}, nil, err
	}
	if err := checkLen("fingerprint", c.Fingerprint, maxFingerprint); err != nil {
		return store.ClaimResult{}, nil, err
	}
	scope := scopeKey(c.Scope)
	now := sqlbase.FloorMicro(c.Now)
	// One primary-key SELECT, as Claim's: the write, to the lock first,
	// tells a key held by a claim not yet committed.
	read := s.q.selectRecord.render(scope, c.Key)
	var seen *store.Record // an uncommitted completion the dirty read saw
	for range maxClaimAttempts {
		var r sqlbase.MicroRow
		if _, err := r.Scan(s.db.QueryRowContext(ctx, read)); err != nil {
			return store.ClaimResult{}, nil, fmt.Errorf("mysqlstore: claim: %w", err)
		}
		if r.State.Valid { // the record exists
			rec, err := r.Record()
			if err != nil {
				return store.ClaimResult{}, nil, fmt.Errorf("mysqlstore: claim, key %q: %w", c.Key, err)
			}
			if !rec.Takeable(now) {
				return store.ClaimResult{Existing: &rec}, nil, nil
			}
		}
		t, outcome, err := s.claimTx(ctx, c, scope, now)
		if err == nil && t != nil && !inTx {
			// Claim: the claim commits on its own, and the lock goes.
			err = t.commitClaim(ctx)
			t = nil
		}
		switch {
		case err != nil:
			return store.ClaimResult{}, nil, fmt.Errorf("mysqlstore: claim: %w", err)
		case outcome == takeInserted, outcome == takeTaken:
			return store.ClaimResult{Acquired: true}, t, nil
		case outcome == takeHeld:
			// A transaction holds the record: its claim, uncommitted,
			// or its end, racing. From here on the answer is never an
			// error, which a caller may take for a store down and, with
			// fail open, run beside the holder: the key is in flight.
			rec, completed, err := s.dirty(ctx, scope, c.Key, now)
			switch {
			case err != nil:
				return inFlight(c, now, seen), nil, nil
			case rec != nil && !completed:
				rec.LeaseEnd = sqlbase.CeilMicro(c.LeaseEnd)
				rec.ExpiresAt = rec.LeaseEnd
				return store.ClaimResult{Existing: rec}, nil, nil
			case rec != nil:
				// Completed, not yet committed or just committed: the
				// next read replays it once its holder is done.
				seen = rec
			default:
				seen = nil // whatever was seen is gone: another holder
			}
			claimRetries.Add(1)
		case outcome == takeLeft:
			claimRetries.Add(1) // lost a race: the next read returns the record
		default:
			deadlockRetries.Add(1)
		}
	}
	// The key stayed held, its holder unseen (or raced) through every
	// attempt: it is in flight.
	return inFlight(c, now, seen), nil, nil
}

// inFlight is the answer of a claim that found c's key held without a
// record to answer with: in progress, with the fingerprint of the
// holder's record when one was seen (an uncommitted completion), else
// c's own (409).
func inFlight(c store.Claim, now time.Time, seen *store.Record) store.ClaimResult {
	lease := sqlbase.CeilMicro(c.LeaseEnd)
	fp := c.Fingerprint
	if seen != nil {
		fp = seen.Fingerprint
	}
	return store.ClaimResult{Existing: &store.Record{Fingerprint: fp, State: store.InProgress,
		CreatedAt: now, LeaseEnd: lease, ExpiresAt: lease}}
}

// Outcomes of a claim's write besides takeSQL's insert ids: InnoDB
// chose it as a deadlock victim (the attempt starts over), or another
// session holds the record's user-level lock (ClaimTx claims nothing).
const (
	takeDeadlock = -1
	takeHeld     = -2
)

// claimTx is one attempt of ClaimTx's write: it returns the transaction
// holding the claim, or nil and why not (takeLeft: a live record;
// takeHeld; takeDeadlock), or an error. Whatever it began and did not
// return is ended.
func (s *ExactlyOnceStore) claimTx(ctx context.Context, c store.Claim, scope string, now time.Time) (*txn, int64, error) {
	// Prepare the completion before taking a connection: preparing takes
	// one of its own (see lazyStmt.get).
	st, done, err := s.commit.get(ctx, s.db)
	if err != nil {
		return nil, 0, err
	}
	txCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	t := &txn{s: s.Store, eo: s, cancel: cancel, stmtDone: done, stmt: st, scope: scope,
		hold:  store.Hold{Ref: store.Ref{Scope: c.Scope, Key: c.Key}, Token: c.Token},
		claim: &c}
	outcome, err := t.take(txCtx, s.txOptions, now)
	if !stop() && err == nil {
		// ctx ended while claiming: database/sql rolls the transaction
		// back, if it started at all, and the claim with it.
		err = context.Cause(ctx)
	}
	switch {
	case deadlock(err):
		t.abandon()
		return nil, takeDeadlock, nil
	case err != nil:
		t.abandon()
		return nil, 0, err
	case outcome != takeInserted && outcome != takeTaken:
		t.abandon()
		return nil, outcome, nil
	}
	return t, outcome, nil
}

// take takes the connection, starts the transaction and claims in it (see
// ClaimTx). It returns takeSQL's outcome, or takeHeld.
func (t *txn) take(ctx context.Context, opts sql.TxOptions, now time.Time) (int64, error) {
	conn, err := t.s.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	t.conn = conn
	t.held = true // from here on, end restores the session or discards it
	if _, err := conn.ExecContext(ctx, t.s.q.hold.render(t.s.table, t.scope, t.hold.Key)); err != nil {
		return 0, err
	}
	var o *sql.TxOptions
	if opts != (sql.TxOptions{}) {
		o = &opts
	}
	if t.tx, err = conn.BeginTx(ctx, o); err != nil {
		return 0, err
	}
	t.mark = make([]byte, 16)
	rand.Read(t.mark)
	c := t.claim
	res, err := t.tx.ExecContext(ctx, t.s.q.takeTx.render(t.scope, c.Key, c.Fingerprint, c.Token,
		now.UnixMicro(), sqlbase.CeilMicro(c.LeaseEnd).UnixMicro(), t.mark))
	if err != nil {
		return 0, err
	}
	id, _ := res.LastInsertId()
	n, _ := res.RowsAffected()
	switch {
	case id == takeTaken, id == takeInserted && n == 1:
		return id, nil
	case id == takeLeft:
		return takeLeft, nil
	case id == takeInserted && n == 0:
		return takeHeld, nil
	}
	return 0, fmt.Errorf("unexpected outcome of the write (insert id %d, %d rows affected)", id, n)
}

// dirtySQL reads what a claim held in another session's transaction
// shows before it commits: its fingerprint, state and expiry, never its
// result. A completion still uncommitted is not a record to replay (the
// transaction may yet roll back), and InnoDB does not promise a consistent
// BLOB to a read that does not wait for the writer.
const dirtySQL = "SELECT fingerprint, state, expires_at FROM {{t}} WHERE scope = :scope AND `key` = :key"

// dirty reads the record of scope (as stored) and key as it stands,
// uncommitted changes included, on a connection of its own: READ
// UNCOMMITTED for the next statement alone (dirtyLevelSQL), then
// dirtySQL. It returns the holder's record as in progress, created at now
// and with no lease of its own (the transaction holds it): a row in
// progress, or a completion that has not expired (the committed read
// found none: it is not committed, or just was), which completed reports;
// nil for no row or an expired one (not taken over yet). A connection
// whose read failed is discarded, so that the level, set for its next
// transaction, never reaches another user of the pool.
func (s *Store) dirty(ctx context.Context, scope, key string, now time.Time) (rec *store.Record, completed bool, err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, false, err
	}
	defer conn.Close()
	var fp []byte
	var state, expires int64
	_, err = conn.ExecContext(ctx, dirtyLevelSQL)
	if err == nil {
		err = conn.QueryRowContext(ctx, s.q.dirty.render(scope, key)).Scan(&fp, &state, &expires)
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, false, nil
	case err != nil:
		conn.Raw(func(any) error { return driver.ErrBadConn }) //nolint:errcheck // marks it for discarding
		return nil, false, err
	case state != int64(store.InProgress) && expires <= now.UnixMicro():
		return nil, false, nil // an expired record, not taken over yet
	}
	return &store.Record{Fingerprint: string(fp), State: store.InProgress, CreatedAt: now}, state != int64(store.InProgress), nil
}

// Get implements store.Getter as Store.Get does, and also returns a
// record held by a claim not yet committed (ClaimTx), as in progress.
func (s *ExactlyOnceStore) Get(ctx context.Context, r store.Ref, now time.Time) (store.Record, bool, error) {
	scope := scopeKey(r.Scope)
	var held bool
	var row sqlbase.MicroRow
	err := s.db.QueryRowContext(ctx, s.q.claimRead.render(s.table, scope, r.Key)).Scan(&held, &row.Fingerprint, &row.State,
		&row.Status, &row.Header, &row.Body, &row.BodyOmitted, &row.CreatedAt, &row.LeaseEnd, &row.ExpiresAt)
	if err != nil {
		return store.Record{}, false, fmt.Errorf("mysqlstore: get: %w", err)
	}
	var rec store.Record
	found := row.State.Valid
	if found {
		if rec, err = row.Record(); err != nil {
			return store.Record{}, false, fmt.Errorf("mysqlstore: get, key %q: %w", r.Key, err)
		}
	}
	if held && (!found || !rec.ExpiresAt.After(now)) {
		d, _, err := s.dirty(ctx, scope, r.Key, now)
		if err != nil {
			return store.Record{}, false, fmt.Errorf("mysqlstore: get: %w", err)
		}
		if d != nil {
			// In progress, its lease the transaction's to end: shown
			// as ending a second from now.
			d.LeaseEnd = sqlbase.CeilMicro(now.Add(time.Second))
			d.ExpiresAt = d.LeaseEnd
			return *d, true, nil
		}
	}
	if !found || !rec.ExpiresAt.After(sqlbase.FloorMicro(now)) {
		return store.Record{}, false, nil
	}
	return rec, true, nil
}

// completeAfterEnd stores a failed outcome on its own after the handler
// ended the transaction (Commit's contract): it completes the claim, and
// when the claim went with the transaction (a rollback), claims the key
// again with the same token and completes that.
func (t *txn) completeAfterEnd(ctx context.Context, c store.Completion) error {
	if t.claim == nil {
		return t.s.Complete(ctx, t.hold, c)
	}
	// Whether the claim outlived the transaction (the handler committed
	// it) is read first, without a lock: should a rollback have taken it
	// and another request claimed the key since, in its transaction, an
	// UPDATE would wait for that one's handler.
	owned, err := t.s.owns(ctx, t.hold)
	switch {
	case err != nil:
		return fmt.Errorf("mysqlstore: commit: %w", err)
	case owned:
		return t.s.Complete(ctx, t.hold, c)
	}
	// Claimed again as it was made (the record keeps its creation time),
	// in a transaction of its own that completes it too: a claim
	// committed on its own could be expired already, and taken over
	// before its completion. The claim, made under the lock, sees a
	// claim made since in another transaction, and does not wait for it.
	res, t2, err := t.eo.claim(ctx, *t.claim, true)
	switch {
	case err != nil:
		return err
	case !res.Acquired:
		return store.ErrLeaseLost
	}
	return t2.Commit(ctx, c)
}

// Release implements store.Store as Store.Release does, but reads the
// record first, without a lock (owns): when the committed record is not
// the claim's in progress (a claim made in a transaction that rolled back
// leaves nothing to release), or another session may be taking it over,
// it returns store.ErrLeaseLost at once. A DELETE would wait for the row lock of
// whichever transaction claimed the key since, for as long as its handler
// runs.
func (s *ExactlyOnceStore) Release(ctx context.Context, h store.Hold) error {
	if err := checkLen("key", h.Key, maxKey); err != nil {
		return err
	}
	owned, err := s.owns(ctx, h)
	switch {
	case err != nil:
		return fmt.Errorf("mysqlstore: release: %w", err)
	case !owned:
		return store.ErrLeaseLost
	}
	return s.Store.Release(ctx, h)
}

// owns reports, with a read that takes no lock and waits for none,
// whether h's claim holds the record as committed, in progress, and no
// other session may be taking it over: one that holds the record's
// user-level lock after the claim's lease ended (on the server's clock,
// which the engine's leases follow) may be, in its transaction, and a
// write to the row would wait for that one's handler. Before the lease
// ends a holder of the lock takes nothing over: it is a claim that lost,
// and lets go within a few statements. The caller's own session has let
// go of the lock by then.
func (s *Store) owns(ctx context.Context, h store.Hold) (bool, error) {
	var token []byte
	var state int64
	var takeover bool
	err := s.db.QueryRowContext(ctx, s.q.owns.render(s.table, scopeKey(h.Scope), h.Key)).Scan(&token, &state, &takeover)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	}
	return string(token) == h.Token && state == int64(store.InProgress) && !takeover, nil
}

// ownsSQL is what owns reads: the record's holder, and whether another
// session may be taking it over (it holds the lock, and the lease ended
// by the server's clock, read as clockSQL reads it but from the date
// alone, since compile takes a colon for a placeholder). A second of
// margin covers an engine whose measure of that clock runs ahead.
const ownsSQL = "SELECT token, state, IFNULL(lease_end <= TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) + 1000000\n" +
	"    AND IS_USED_LOCK(" + holdName + ") IS NOT NULL, FALSE) FROM {{t}} WHERE scope = :scope AND `key` = :key"

// commitClaim commits a transaction that holds nothing but its claim (the
// exactly-once Claim), and gives the connection back.
func (t *txn) commitClaim(ctx context.Context) error {
	t.done = true
	defer t.cancel()
	return t.end(ctx, t.tx.Commit)
}
