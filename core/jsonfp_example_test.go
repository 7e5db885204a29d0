package idem_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// A payments API whose clients put the key in the body (AIP-155's
// request_id) and add a timestamp and a signature that change on every
// retry: the JSON fingerprint ignores them and the spelling of the JSON.
func ExampleWithJSONFingerprint() {
	engine, err := idem.New(&mapStore{recs: map[store.Ref]*storedRec{}},
		idem.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}
	runs := 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments", func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "payment %d\n", runs)
	})
	h := engine.Middleware(
		idem.WithKeyField("request_id"),
		idem.WithJSONFingerprint(idem.Ignore("/sent_at", "/signature")),
	)(mux)

	for _, body := range []string{
		`{"request_id":"pay-7","amount":12.50,"sent_at":"10:00:00","signature":"a1"}`,
		`{ "amount": 12.5, "request_id": "pay-7", "sent_at": "10:00:03", "signature": "b2" }`,
		`{"request_id":"pay-7","amount":13,"sent_at":"10:00:09","signature":"c3"}`,
		`{"request_id":"pay-8","amount":12.50,}`,
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/payments", strings.NewReader(body)))
		first, _, _ := strings.Cut(w.Body.String(), ",")
		fmt.Println(w.Code, w.Header().Get("Idempotent-Replayed"), strings.TrimSpace(first))
	}
	// Output:
	// 201  payment 1
	// 201 true payment 1
	// 422  {"type":"https://github.com/idemkit/idem/blob/main/docs/problems.md#key-reused"
	// 400  {"type":"https://github.com/idemkit/idem/blob/main/docs/problems.md#invalid-json"
}

// Two spellings of one JSON value have one canonical form (RFC 8785).
func ExampleCanonicalJSON() {
	for _, s := range []string{
		`{"b": 1.0E2, "a": "caf\u00e9", "c": [1e-7, 0.000001]}`,
		`{"c":[1E-7,1e-6],"a":"café","b":100}`,
	} {
		canon, err := idem.CanonicalJSON([]byte(s))
		fmt.Println(string(canon), err)
	}
	_, err := idem.CanonicalJSON([]byte(`{"a":1,"a":2}`))
	fmt.Println(err)
	// Output:
	// {"a":"café","b":100,"c":[1e-7,0.000001]} <nil>
	// {"a":"café","b":100,"c":[1e-7,0.000001]} <nil>
	// idem: invalid JSON at offset 0: the object starting there has the member name "a" twice
}
