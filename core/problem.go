package idem

import (
	"encoding/json"
	"net/http"
	"strconv"
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
)

type problemKind struct {
	name   string
	status int
	title  string
}

// writeProblem answers with an application/problem+json body. retryAfter,
// when positive, is sent as Retry-After in seconds.
func (e *Engine) writeProblem(w http.ResponseWriter, k problemKind, detail string, retryAfter int) {
	body, _ := json.Marshal(problem{Type: e.cfg.problemBase + k.name, Title: k.title, Status: k.status, Detail: detail})
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
