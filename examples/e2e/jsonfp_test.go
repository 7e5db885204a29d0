package e2e

import (
	"strings"
	"testing"
)

// TestFixtureJSONFingerprint drives -fingerprint json, -fingerprint-ignore
// and -key-field over a real socket: the same JSON written another way,
// or with another value of an ignored member, is a replay; invalid JSON
// is a 400 problem; the key may come from the body.
func TestFixtureJSONFingerprint(t *testing.T) {
	t.Parallel()
	p := start(t, "fixture", "-framework", "gin", "-fingerprint", "json", "-fingerprint-ignore", "/sent_at", "-key-field", "request_id")
	key := "j-" + randomName()
	first := call(t, "POST", p.url+"/echo", key, `{"amount": 12, "sent_at": 1}`, "Content-Type", "application/json")
	again := call(t, "POST", p.url+"/echo", key, `{"sent_at":2,"amount":12.0}`, "Content-Type", "application/json")
	if first.code != 201 || !again.replayed() || again.body != first.body {
		t.Errorf("same meaning: %d %q, retry %d %q replayed=%v", first.code, first.body, again.code, again.body, again.replayed())
	}
	if r := call(t, "POST", p.url+"/echo", key, `{"amount":13,"sent_at":1}`); r.code != 422 {
		t.Errorf("another amount: %d, want 422", r.code)
	}
	if r := call(t, "POST", p.url+"/echo", "j-"+randomName(), `{"amount":`); r.code != 400 || !strings.Contains(r.body, "invalid-json") {
		t.Errorf("invalid JSON: %d %q, want 400 invalid-json", r.code, r.body)
	}
	id := "req-" + randomName()
	a := call(t, "POST", p.url+"/echo", "", `{"request_id":"`+id+`","amount":5}`)
	b := call(t, "POST", p.url+"/echo", "", `{"amount":5,"request_id":"`+id+`"}`)
	if a.code != 201 || !b.replayed() {
		t.Errorf("key from the body: %d, retry %d replayed=%v", a.code, b.code, b.replayed())
	}
	if counter(t, p) != 2 {
		t.Errorf("handler ran %d times, want 2", counter(t, p))
	}
}
