package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

var quietLog = slog.New(slog.DiscardHandler)

// orderServer is an exactly-once engine in front of a handler that puts
// an order through the request's transaction. The order's id comes from
// the request body; its Put is conditioned on the id being new, so a
// second key with the same body conflicts at commit. A body of "fail"
// makes the handler answer 503 after collecting its write.
type orderServer struct {
	client *dynamodb.Client
	store  *Store
	orders string // the orders table
	srv    *httptest.Server
	runs   atomic.Int32
}

func newOrderServer(t *testing.T, opts ...idem.Option) *orderServer {
	client := newClient(t)
	s := newStore(t, client, newTable(t, client)...)
	orders := newTable(t, client, WithPartitionKey("id"))
	o := &orderServer{client: client, store: s, orders: ordersTable(t, orders)}
	e, err := idem.New(s.ExactlyOnce(), append([]idem.Option{idem.WithLogger(quietLog)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		o.runs.Add(1)
		tx, ok := Tx(r.Context())
		if !ok {
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		body, _ := io.ReadAll(r.Body)
		id := string(body)
		err := tx.Put(types.Put{
			TableName:           aws.String(o.orders),
			Item:                map[string]types.AttributeValue{"id": attrS(id), "run": attrN(int64(o.runs.Load()))},
			ConditionExpression: aws.String("attribute_not_exists(id)"),
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if id == "fail" {
			http.Error(w, "downstream unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q}`, id)
	})
	o.srv = httptest.NewServer(e.Middleware()(mux))
	t.Cleanup(o.srv.Close)
	return o
}

// ordersTable returns the table name newTable's options give.
func ordersTable(t testing.TB, opts []Option) string {
	s, err := New(&dynamodb.Client{}, opts...)
	if err != nil {
		panic(err) // newTable's options were accepted already
	}
	return s.Table()
}

func (o *orderServer) post(t *testing.T, key, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", o.srv.URL+"/orders", strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	resp, err := o.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// order returns the run that wrote order id, or 0 when there is none.
func (o *orderServer) order(t *testing.T, id string) int {
	t.Helper()
	out, err := o.client.GetItem(t.Context(), &dynamodb.GetItemInput{
		TableName: aws.String(o.orders), Key: map[string]types.AttributeValue{"id": attrS(id)}, ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.Item == nil {
		return 0
	}
	d := decoder{item: out.Item}
	return int(d.num("run", true))
}

func TestEngineExactlyOnce(t *testing.T) {
	o := newOrderServer(t)
	scope := idem.Scope("", "POST", "/orders")

	t.Run("2xx commits order and record", func(t *testing.T) {
		resp, body := o.post(t, "k-ok", "o1")
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		run := o.order(t, "o1")
		resp2, body2 := o.post(t, "k-ok", "o1")
		if resp2.StatusCode != http.StatusCreated || body2 != body || resp2.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry: %d %q %v; want the replay of %q", resp2.StatusCode, body2, resp2.Header, body)
		}
		if run == 0 || o.order(t, "o1") != run {
			t.Fatalf("order o1 written by run %d, then %d", run, o.order(t, "o1"))
		}
	})

	t.Run("5xx drops the writes and releases", func(t *testing.T) {
		runs := o.runs.Load()
		for i := range 2 {
			if resp, body := o.post(t, "k-5xx", "fail"); resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("attempt %d: status %d: %s", i, resp.StatusCode, body)
			}
		}
		if got := o.runs.Load() - runs; got != 2 {
			t.Fatalf("handler ran %d times, want 2 (released after each 5xx)", got)
		}
		if o.order(t, "fail") != 0 {
			t.Fatal("the order of a 5xx was written")
		}
	})

	t.Run("conflicting write answers 503 and releases", func(t *testing.T) {
		if resp, body := o.post(t, "k-first", "dup"); resp.StatusCode != http.StatusCreated {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		first := o.order(t, "dup")
		runs := o.runs.Load()
		// Another key with the same order id: the Put's condition fails
		// at commit, after the handler answered 201.
		resp, body := o.post(t, "k-dup", "dup")
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "commit-failed") || strings.Contains(body, `"id"`) {
			t.Fatalf("status %d: %s; want 503 commit-failed without the handler's body", resp.StatusCode, body)
		}
		if resp.Header.Get("Retry-After") == "" {
			t.Fatalf("commit-failed without Retry-After: %v", resp.Header)
		}
		if o.order(t, "dup") != first {
			t.Fatalf("order dup rewritten by run %d", o.order(t, "dup"))
		}
		resp, _ = o.post(t, "k-dup", "dup")
		if resp.StatusCode != http.StatusServiceUnavailable || o.runs.Load()-runs != 2 {
			t.Fatalf("retry: status %d, %d runs; want 503 after running again", resp.StatusCode, o.runs.Load()-runs)
		}
		if _, ok, err := o.store.Get(t.Context(), store.Ref{Scope: scope, Key: "k-dup"}, time.Now()); err != nil || ok {
			t.Fatalf("record left after failed commits: %v %v", ok, err)
		}
	})

	t.Run("concurrent duplicates run once", func(t *testing.T) {
		runs := o.runs.Load()
		var wg sync.WaitGroup
		codes := make(chan int, 20)
		for range 20 {
			wg.Go(func() {
				resp, _ := o.post(t, "k-conc", "conc")
				codes <- resp.StatusCode
			})
		}
		wg.Wait()
		close(codes)
		seen := map[int]int{}
		for c := range codes {
			seen[c]++
		}
		if got := o.runs.Load() - runs; got != 1 || o.order(t, "conc") == 0 {
			t.Fatalf("handler ran %d times, order run %d; codes %v", got, o.order(t, "conc"), seen)
		}
		if seen[http.StatusCreated]+seen[http.StatusConflict] != 20 {
			t.Fatalf("codes %v", seen)
		}
	})
}

// TestTxCommitErrors checks Commit's answers store by store call: the
// writes and the record land together; a lost claim writes neither.
func TestTxCommitErrors(t *testing.T) {
	client := newClient(t)
	s := newStore(t, client, newTable(t, client)...).ExactlyOnce()
	orders := ordersTable(t, newTable(t, client, WithPartitionKey("id")))
	ctx := t.Context()
	now := time.Now()
	claim := func(key, token string) {
		t.Helper()
		r, err := s.Claim(ctx, store.Claim{Scope: "s", Key: key, Fingerprint: "fp", Token: token, Now: now, LeaseEnd: now.Add(time.Minute)})
		if err != nil || !r.Acquired {
			t.Fatalf("claim %s: %+v %v", key, r, err)
		}
	}
	begin := func(key, token string) (store.Tx, *TxWriter) {
		t.Helper()
		tx, err := s.BeginTx(ctx, store.Hold{Ref: store.Ref{Scope: "s", Key: key}, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		w, ok := Tx(tx.Context(ctx))
		if !ok {
			t.Fatal("Tx found no writer in the transaction's context")
		}
		return tx, w
	}
	put := func(id string) types.Put {
		return types.Put{TableName: aws.String(orders), Item: map[string]types.AttributeValue{"id": attrS(id)}}
	}
	exists := func(id string) bool {
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(orders),
			Key: map[string]types.AttributeValue{"id": attrS(id)}, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		return out.Item != nil
	}
	ok := store.Completion{Result: store.Result{Head: []byte{1, 200, 1}, Body: []byte("ok")}, Now: now, ExpiresAt: now.Add(time.Hour)}

	t.Run("full", func(t *testing.T) {
		claim("full", "t1")
		tx, w := begin("full", "t1")
		for i := range MaxTxItems {
			if err := w.Put(put(fmt.Sprintf("full-%d", i))); err != nil {
				t.Fatalf("write %d: %v", i+1, err)
			}
		}
		if err := w.Put(put("one-too-many")); !errors.Is(err, ErrTxFull) {
			t.Fatalf("write %d: %v, want ErrTxFull", MaxTxItems+1, err)
		}
		if err := tx.Commit(ctx, ok); err != nil {
			t.Fatalf("commit of %d writes: %v", MaxTxItems, err)
		}
		if !exists("full-0") || !exists(fmt.Sprintf("full-%d", MaxTxItems-1)) || exists("one-too-many") {
			t.Fatal("the committed writes are not all there")
		}
		if err := w.Put(put("late")); !errors.Is(err, ErrTxDone) {
			t.Fatalf("write after commit: %v, want ErrTxDone", err)
		}
	})

	t.Run("lost claim writes nothing", func(t *testing.T) {
		claim("lost", "t1")
		tx, w := begin("lost", "t1")
		if err := w.Put(put("lost-order")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Delete(ctx, store.Ref{Scope: "s", Key: "lost"}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx, ok); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("commit: %v, want ErrLeaseLost", err)
		}
		if exists("lost-order") {
			t.Fatal("the handler's write landed without the record")
		}
	})

	t.Run("condition check", func(t *testing.T) {
		claim("check", "t1")
		tx, w := begin("check", "t1")
		if err := w.Put(put("check-order")); err != nil {
			t.Fatal(err)
		}
		if err := w.ConditionCheck(types.ConditionCheck{TableName: aws.String(orders),
			Key: map[string]types.AttributeValue{"id": attrS("no-such-customer")}, ConditionExpression: aws.String("attribute_exists(id)")}); err != nil {
			t.Fatal(err)
		}
		err := tx.Commit(ctx, ok)
		if !errors.Is(err, ErrTxConflict) {
			t.Fatalf("commit: %v, want ErrTxConflict", err)
		}
		if exists("check-order") {
			t.Fatal("a write landed although the transaction's condition failed")
		}
		if r, _, _ := s.Get(ctx, store.Ref{Scope: "s", Key: "check"}, now); r.State != store.InProgress {
			t.Fatalf("record state %v after a failed commit, want in progress (the engine releases it)", r.State)
		}
	})

	t.Run("large body with writes", func(t *testing.T) {
		claim("large", "t1")
		tx, w := begin("large", "t1")
		if err := w.Update(types.Update{TableName: aws.String(orders), Key: map[string]types.AttributeValue{"id": attrS("large-order")},
			UpdateExpression: aws.String("SET n = :n"), ExpressionAttributeValues: map[string]types.AttributeValue{":n": attrN(1)}}); err != nil {
			t.Fatal(err)
		}
		big := randomBytes(900 << 10)
		if err := tx.Commit(ctx, store.Completion{Result: store.Result{Head: []byte{1, 201, 1}, Body: big}, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		r, found, err := s.Get(ctx, store.Ref{Scope: "s", Key: "large"}, now)
		if err != nil || !found || string(r.Result.Body) != string(big) || !exists("large-order") {
			t.Fatalf("found %v, %d bytes, err %v, order %v", found, len(r.Result.Body), err, exists("large-order"))
		}
	})

	t.Run("rollback", func(t *testing.T) {
		claim("rb", "t1")
		tx, w := begin("rb", "t1")
		if err := w.Delete(types.Delete{TableName: aws.String(orders), Key: map[string]types.AttributeValue{"id": attrS("full-0")}}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(context.WithoutCancel(ctx)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatalf("second rollback: %v", err)
		}
		if err := w.Put(put("x")); !errors.Is(err, ErrTxDone) {
			t.Fatalf("write after rollback: %v, want ErrTxDone", err)
		}
		if !exists("full-0") {
			t.Fatal("a rolled-back delete happened")
		}
	})
}
