package dynamostore

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	idem "github.com/idemkit/idem/core"
)

// TestEngineHeartbeatExactlyOnce runs a handler for longer than its lease
// in exactly-once mode: the engine's heartbeat (Extend) keeps the claim,
// so a duplicate sent past the first lease end gets 409 instead of
// running again, and the handler's write lands with the record.
func TestEngineHeartbeatExactlyOnce(t *testing.T) {
	client := newClient(t)
	s := newStore(t, client, newTable(t, client)...)
	orders := ordersTable(t, newTable(t, client, WithPartitionKey("id")))
	const lease = 2 * time.Second
	e, err := idem.New(s.ExactlyOnce(), idem.WithLease(lease), idem.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			close(started)
		}
		tx, _ := Tx(r.Context())
		if err := tx.Put(types.Put{TableName: aws.String(orders), Item: map[string]types.AttributeValue{"id": attrS("slow")}}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		<-release
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "done")
	})))
	defer srv.Close()
	post := func() (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/slow", strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "slow")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	first := make(chan int, 1)
	go func() { code, _ := post(); first <- code }()
	<-started
	time.Sleep(lease + lease/2) // past the first lease end: only the heartbeat keeps the claim
	if code, body := post(); code != http.StatusConflict {
		t.Fatalf("duplicate past the lease end: %d %s; want 409 (the heartbeat extends the claim)", code, body)
	}
	close(release)
	if code := <-first; code != http.StatusCreated {
		t.Fatalf("first request: %d", code)
	}
	if code, body := post(); code != http.StatusCreated || body != "done" || runs.Load() != 1 {
		t.Fatalf("retry: %d %q after %d runs; want the replay of one run", code, body, runs.Load())
	}
	out, err := client.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(orders),
		Key: map[string]types.AttributeValue{"id": attrS("slow")}, ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item == nil {
		t.Fatalf("the handler's write is missing: %v", err)
	}
}
