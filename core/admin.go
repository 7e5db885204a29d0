package idem

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/core/store"
)

// AdminHandler returns an http.Handler that lets an operator look at one
// record and evict it. Mount it behind your own authentication: evicting a
// key lets the next duplicate of that request run again.
//
// A record is addressed exactly as the middleware derives it, by query
// parameters, URL-encoded: namespace (what the namespace function returns;
// empty or absent for global), method (such as POST, in any case; for Do
// and Start, Op.Kind as given, such as grpc), route (the route template,
// such as /orders/{id}, sent as %2Forders%2F%7Bid%7D, or with curl -g; for
// Do and Start, Op.Name) and key (the Idempotency-Key value; the quoted
// form is accepted). With WithGlobalKeys, method and route are both
// present and empty (method=&route=).
//
//	GET    ?method=POST&route=/orders&key=abc   the record, never its body
//	DELETE ?method=POST&route=/orders&key=abc   evicts it
//
// GET answers 200 with {"found": true, "state", "created_at", "lease_end",
// "expires_at", "status", "body_size", "body_omitted", "fingerprint"}, or a
// 404 problem (admin-not-found); DELETE answers 200 with {"deleted": bool}.
// Both answer 501 when the store lacks the Getter or Deleter capability,
// and 400 for a missing or malformed parameter; every error is a problem,
// of a type under DefaultProblemTypeBase (WithProblemTypeBase is the
// middleware's).
func (e *Engine) AdminHandler() http.Handler {
	return http.HandlerFunc(e.serveAdmin)
}

// AdminRecord is the admin handler's view of a record.
type AdminRecord struct {
	Found       bool       `json:"found"`
	Namespace   string     `json:"namespace"`
	Method      string     `json:"method"`
	Route       string     `json:"route"`
	State       string     `json:"state,omitempty"`
	Fingerprint string     `json:"fingerprint,omitempty"`
	CreatedAt   *time.Time `json:"created_at,omitempty"`
	LeaseEnd    *time.Time `json:"lease_end,omitempty"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	Status      int        `json:"status,omitempty"`
	BodySize    int        `json:"body_size"`
	BodyOmitted bool       `json:"body_omitted,omitempty"`
}

func (e *Engine) serveAdmin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodDelete {
		w.Header().Set("Allow", "GET, HEAD, DELETE")
		writeProblem(w, DefaultProblemTypeBase, problemKind{"admin-method", http.StatusMethodNotAllowed, "Method not allowed"}, "Use GET to look at a record and DELETE to evict it.", 0)
		return
	}
	q := r.URL.Query()
	method := adminMethod(strings.TrimSpace(q.Get("method")))
	route := q.Get("route")
	ns := q.Get("namespace")
	var missing []string
	if !q.Has("method") {
		missing = append(missing, "method") // present but empty: WithGlobalKeys
	}
	if !q.Has("route") {
		missing = append(missing, "route") // present but empty is a valid route
	}
	if q.Get("key") == "" {
		missing = append(missing, "key")
	}
	if len(missing) > 0 {
		writeProblem(w, DefaultProblemTypeBase, problemAdminParams, "Missing query parameters: "+strings.Join(missing, ", ")+".", 0)
		return
	}
	key, err := ParseKey([]string{q.Get("key")})
	if err != nil {
		writeProblem(w, DefaultProblemTypeBase, problemAdminParams, "The key parameter is not a valid key: "+strings.TrimPrefix(err.Error(), ErrInvalidKey.Error()+": ")+".", 0)
		return
	}
	scope := Scope(ns, method, route)
	if r.Method == http.MethodDelete {
		e.adminDelete(w, r, scope, key)
		return
	}
	e.adminGet(w, r, store.Ref{Scope: scope, Key: key}, ns, method, route)
}

// adminMethod is the method part of a record's address: an HTTP method
// name in any case as the middleware sees it (upper case), anything else
// (Do's and Start's Op.Kind, such as "grpc") as given.
func adminMethod(m string) string {
	switch u := strings.ToUpper(m); u {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return u
	}
	return m
}

// adminGet answers a GET: the record ref names, as AdminRecord.
func (e *Engine) adminGet(w http.ResponseWriter, r *http.Request, ref store.Ref, ns, method, route string) {
	g, ok := e.store.(store.Getter)
	if !ok {
		writeProblem(w, DefaultProblemTypeBase, problemAdminUnsupported, "This store cannot look records up (it does not implement store.Getter).", 0)
		return
	}
	now, err := e.now(r.Context())
	if err != nil {
		writeProblem(w, DefaultProblemTypeBase, problemStore, "Reading the store's clock failed: "+err.Error(), seconds(e.retryAfter(0)))
		return
	}
	ctx := e.storeCall(r.Context(), false)
	rec, found, err := g.Get(ctx, ref, now)
	e.endCall(ctx, StoreGet, err, nil)
	if err != nil {
		writeProblem(w, DefaultProblemTypeBase, problemStore, "Looking the record up failed: "+err.Error(), seconds(e.retryAfter(0)))
		return
	}
	if !found {
		writeProblem(w, DefaultProblemTypeBase, problemAdminNotFound, "No record is stored for key "+strconv.Quote(ref.Key)+" of "+method+" "+strconv.Quote(route)+nsDetail(ns)+", or it has expired.", 0)
		return
	}
	dec, err := fromStore(&rec)
	if err != nil {
		writeProblem(w, DefaultProblemTypeBase, problemStore, "The stored record is unreadable: "+err.Error(), 0)
		return
	}
	writeJSON(w, http.StatusOK, adminRecord(dec, ns, method, route))
}

// nsDetail names a namespace in a problem's detail.
func nsDetail(ns string) string {
	if ns == "" {
		return " (global)"
	}
	return " in namespace " + strconv.Quote(ns)
}

var (
	problemAdminNotFound    = problemKind{"admin-not-found", http.StatusNotFound, "No such record"}
	problemAdminParams      = problemKind{"admin-parameters", http.StatusBadRequest, "Invalid record address"}
	problemAdminUnsupported = problemKind{"admin-unsupported", http.StatusNotImplemented, "Not supported by this store"}
)

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// adminDelete evicts the record for (scope, key).
func (e *Engine) adminDelete(w http.ResponseWriter, r *http.Request, scope, key string) {
	d, ok := e.store.(store.Deleter)
	if !ok {
		writeProblem(w, DefaultProblemTypeBase, problemAdminUnsupported, "This store cannot delete records (it does not implement store.Deleter).", 0)
		return
	}
	ctx := e.storeCall(r.Context(), false)
	deleted, err := d.Delete(ctx, store.Ref{Scope: scope, Key: key})
	e.endCall(ctx, StoreDelete, err, nil)
	// Whatever the store answered (a delete that timed out may have
	// landed), this engine's duplicates ask the store again.
	e.local.forget(scope, key)
	e.cache.drop(scope, key)
	if err != nil {
		writeProblem(w, DefaultProblemTypeBase, problemStore, "Deleting the record failed: "+err.Error(), seconds(e.retryAfter(0)))
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"deleted": deleted})
}

// adminRecord is what the admin handler shows of rec.
func adminRecord(rec *record, ns, method, route string) AdminRecord {
	out := AdminRecord{Found: true, Namespace: ns, Method: method, Route: route}
	out.State = rec.State.String()
	out.Fingerprint = rec.Fingerprint
	out.CreatedAt = timePtr(rec.CreatedAt)
	out.LeaseEnd = timePtr(rec.LeaseEnd)
	out.ExpiresAt = timePtr(rec.ExpiresAt)
	if rec.Response != nil {
		out.Status = rec.Response.Status
		out.BodySize = len(rec.Response.Body)
		out.BodyOmitted = rec.Response.BodyOmitted
	}
	return out
}
