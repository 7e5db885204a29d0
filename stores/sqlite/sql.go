package sqlitestore

import "github.com/idemkit/idem/stores/sqlbase"

// queries holds the store's statements for one table. Every value is a
// parameter; the table name, validated, is the only thing spliced in.
type queries struct {
	get, read, claim, complete, release, delete, evict, extend, hold, expired string
}

const recordCols = sqlbase.RecordColumns

func newQueries(table string) queries {
	t := quoteIdent(table)
	where := ` WHERE scope = ?1 AND "key" = ?2`
	return queries{
		read: `SELECT ` + recordCols + ` FROM ` + t + where,
		get:  `SELECT ` + recordCols + ` FROM ` + t + where + ` AND expires_at > ?3`,
		// claim inserts the claim, or takes the row over when it has
		// expired (?5 is the claim's now) or is an in-progress claim whose
		// lease has ended; otherwise it changes nothing (0 rows).
		claim: `INSERT INTO ` + t + ` (scope, "key", fingerprint, token, state, created_at, lease_end, expires_at)
VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?6)
ON CONFLICT (scope, "key") DO UPDATE SET
  fingerprint = excluded.fingerprint, token = excluded.token, state = 1,
  status = NULL, headers = NULL, body = NULL, body_omitted = 0,
  created_at = excluded.created_at, lease_end = excluded.lease_end, expires_at = excluded.expires_at
WHERE expires_at <= excluded.created_at OR (state = 1 AND lease_end <= excluded.created_at)`,
		// complete keeps the result's Head in headers and leaves status
		// NULL: a status is what marks a row written before results were
		// opaque (sqlbase.Row.Record).
		complete: `UPDATE ` + t + ` SET state = 2, status = NULL, headers = ?4, body = ?5, body_omitted = ?6,
  lease_end = NULL, expires_at = ?7` + where + ` AND token = ?3 AND state = 1`,
		release: `DELETE FROM ` + t + where + ` AND token = ?3 AND state = 1`,
		delete:  `DELETE FROM ` + t + where,
		evict:   `DELETE FROM ` + t + where + ` AND token = ?3`,
		extend:  `UPDATE ` + t + ` SET lease_end = ?4, expires_at = ?4` + where + ` AND token = ?3 AND state = 1`,
		// hold is an exactly-once transaction's first statement: it
		// changes nothing, but matches one row only while token holds the
		// claim, and takes SQLite's write lock.
		hold: `UPDATE ` + t + ` SET state = state` + where + ` AND token = ?3 AND state = 1`,
		// expired deletes one batch of removable rows: completed ones from
		// their expiry, in-progress ones a lease later (see DeleteExpired).
		// expires_at <= now holds for both, so the index finds them.
		expired: `DELETE FROM ` + t + ` WHERE rowid IN (SELECT rowid FROM ` + t + `
  WHERE expires_at <= ?1 AND (state = 2 OR lease_end + (lease_end - created_at) <= ?1) LIMIT ?2)`,
	}
}
