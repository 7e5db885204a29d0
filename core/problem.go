package idem

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// The problems the engine answers with: the name appended to the type base,
// the status and the title.
var (
	problemMissingKey     = problemKind{"missing-key", http.StatusBadRequest, "Idempotency key required"}
	problemInvalidKey     = problemKind{"invalid-key", http.StatusBadRequest, "Invalid idempotency key"}
	problemBodyTooLarge   = problemKind{"body-too-large", http.StatusRequestEntityTooLarge, "Request body too large"}
	problemBodyUnreadable = problemKind{"body-unreadable", http.StatusBadRequest, "Request body could not be read"}
	problemMismatch       = problemKind{"key-reused", http.StatusUnprocessableEntity, "Idempotency key reused with a different request"}
	problemConflict       = problemKind{"conflict", http.StatusConflict, "Request with this idempotency key is in progress"}
	problemStore          = problemKind{"store-unavailable", http.StatusServiceUnavailable, "Idempotency store unavailable"}
	problemCommit         = problemKind{"commit-failed", http.StatusServiceUnavailable, "The request's transaction failed to commit"}
	problemCanceled       = problemKind{"canceled", 499, "Request canceled"}
	problemNoNamespace    = problemKind{"namespace-required", http.StatusForbidden, "Client identity required"}
	problemNotAcceptable  = problemKind{"not-acceptable", http.StatusNotAcceptable, "Stored response not acceptable"}
	problemInvalidJSON    = problemKind{"invalid-json", http.StatusBadRequest, "Request body is not valid JSON"}
	problemUnreadable     = problemKind{"record-unreadable", http.StatusInternalServerError, "Stored response cannot be decrypted"}
)

// The details of the problems whose answer does not depend on the request.
const (
	detailMismatch      = "This key was already used with a different path, query or body. Use a new key for a new request."
	detailConflict      = "A request with this key is still being processed; retry later."
	detailStore         = "The idempotency store failed or did not answer in time; retry with the same key."
	detailCommit        = "The transaction holding the request's changes and its stored response failed to commit; retry with the same key to learn the outcome."
	detailCanceled      = "The request was canceled before it was claimed."
	detailNotAcceptable = "The stored response is content-encoded in a coding this request does not accept, and idem cannot decode it. Retry with an Accept-Encoding that accepts it."
	detailUnreadable    = "The response stored for this key is encrypted with a key this server does not hold, or was altered. It is not replayed, and the request is not run again; the operators are told."
	detailNoNamespace   = "The request carries no client identity to scope its idempotency key. Authenticate; if you did, the server mounts idem before its authentication middleware."
)

type problemKind struct {
	name   string
	status int
	title  string
}

// writeProblem answers with an application/problem+json body. retryAfter,
// when positive, is sent as Retry-After in seconds.
func writeProblem(w http.ResponseWriter, base string, k problemKind, detail string, retryAfter int) {
	body, _ := json.Marshal(problem{Type: base + k.name, Title: k.title, Status: k.status, Detail: detail})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(k.status)
	_, _ = w.Write(body)
}

// Problem is an RFC 9457 problem details answer, as the net/http
// middleware sends them, for transports that write their own responses.
type Problem struct {
	Type   string // the policy's problem type base (WithProblemTypeBase) and the problem's name
	Title  string
	Status int
	Detail string
	// RetryAfter, when positive, is sent as the Retry-After header: whole
	// seconds before a retry with the same key can succeed.
	RetryAfter int
}

// JSON returns p's body, to send as application/problem+json (with
// Cache-Control: no-store, as the middleware does).
func (p Problem) JSON() []byte {
	body, _ := json.Marshal(problem{Type: p.Type, Title: p.Title, Status: p.Status, Detail: p.Detail})
	return body
}

// ProblemType returns the type of the problem named name, as the policy
// writes them (WithProblemTypeBase and the name), for an adapter's own
// answers: "body-too-large", "body-unreadable", or a name of its own.
func (p *Policy) ProblemType(name string) string { return p.h.problemBase + name }

// Problem returns the HTTP answer to an error from Start or Finish (or
// Do): 400 for ErrMissingKey and ErrInvalidKey, 403 for
// ErrNamespaceRequired, 422 for ErrMismatch, 409 for ErrInFlight, 503 for
// ErrStoreFailure (commit-failed when a transaction's commit failed), 499
// for a canceled context, 400 for ErrInvalidJSON, 406 for ErrNotAcceptable
// and 500 for ErrUndecryptable. ok is false for any
// other error, which is the transport's own.
func (p *Policy) Problem(err error) (Problem, bool) {
	var k problemKind
	var detail string
	retry := 0
	var re *RetryError
	if errors.As(err, &re) {
		retry = seconds(re.After)
	}
	switch {
	case errors.Is(err, ErrMissingKey):
		k, detail = problemMissingKey, "Send an "+p.h.keyHeader+" header with a unique key, such as a UUID."
	case errors.Is(err, ErrInvalidKey):
		k, detail = problemInvalidKey, sentence(strings.TrimPrefix(err.Error(), ErrInvalidKey.Error()+": "))
	case errors.Is(err, ErrNamespaceRequired):
		k, detail = problemNoNamespace, detailNoNamespace
	case errors.Is(err, ErrMismatch):
		k, detail = problemMismatch, detailMismatch
	case errors.Is(err, ErrInFlight):
		k, detail = problemConflict, detailConflict
	case errors.Is(err, errCommit):
		k, detail = problemCommit, detailCommit
	case errors.Is(err, ErrStoreFailure):
		k, detail = problemStore, detailStore
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		k, detail = problemCanceled, detailCanceled
	case errors.Is(err, ErrNotAcceptable):
		k, detail = problemNotAcceptable, detailNotAcceptable
	case errors.Is(err, ErrUndecryptable):
		k, detail = problemUnreadable, detailUnreadable
	case errors.Is(err, ErrInvalidJSON):
		k, detail = problemInvalidJSON, sentence(strings.TrimPrefix(err.Error(), "idem: "))
	default:
		return Problem{}, false
	}
	return Problem{Type: p.h.problemBase + k.name, Title: k.title, Status: k.status, Detail: detail, RetryAfter: retry}, true
}
