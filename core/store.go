package idem

import (
	"net/http"
	"time"

	"github.com/idemkit/idem/core/store"
)

// ErrLeaseLost is the error of a store call whose claim no longer holds
// its record (store.ErrLeaseLost): the record is gone, another request
// took the key over after the lease ended, or it is already completed.
var ErrLeaseLost = store.ErrLeaseLost

// Store keeps idempotency records; package store holds its contract and
// its optional capabilities, for store authors. The stores module of each
// database (memstore, redisstore, pgxstore, ...) gives one.
type Store = store.Store

// Response is a stored HTTP response.
type Response struct {
	// Status is the HTTP status code, 200 to 599.
	Status int
	// Header holds the headers to replay. The engine never stores
	// Set-Cookie, Date, Content-Length or hop-by-hop headers.
	Header http.Header
	// Body is the response body. It is empty when BodyOmitted is set.
	Body []byte
	// BodyOmitted reports that the body was larger than the engine's
	// response cap and was streamed to the first client without being
	// kept. A replay carries the status and headers only.
	BodyOmitted bool

	kind resultKind // an HTTP response (0), or what Do stores
}

// record is a store's record with its result decoded.
type record struct {
	Fingerprint string
	State       store.State
	Response    *Response // set when State is store.Completed
	CreatedAt   time.Time
	LeaseEnd    time.Time
	ExpiresAt   time.Time
}
