package dynamostore

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// randomBytes returns n bytes that do not compress.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{'d', 'y', 'n'}).Read(b)
	return b
}

// rawItem reads the record's item as DynamoDB holds it.
func rawItem(t *testing.T, client *dynamodb.Client, s *Store, scope, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := client.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(s.Table()), Key: s.Key(scope, key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name)
		switch v := v.(type) {
		case *types.AttributeValueMemberB:
			n += len(v.Value)
		case *types.AttributeValueMemberS:
			n += len(v.Value)
		default:
			n += 21
		}
	}
	return n
}

// head returns a Head of n bytes: the format byte the engine gives an
// HTTP head, then fill repeated or, when fill is nil, random bytes.
func head(n int, fill []byte) []byte {
	h := []byte{1}
	if fill == nil {
		return append(h, randomBytes(n-1)...)
	}
	for len(h) < n {
		h = append(h, fill[:min(len(fill), n-len(h))]...)
	}
	return h
}

// complete claims (scope "s", key) with token "tok-"+key and completes
// it with res.
func complete(t *testing.T, s *Store, key string, res store.Result, now time.Time) {
	t.Helper()
	c := store.Claim{Scope: "s", Key: key, Fingerprint: "fp", Token: "tok-" + key, Now: now, LeaseEnd: now.Add(time.Minute)}
	r, err := s.Claim(t.Context(), c)
	if err != nil || !r.Acquired {
		t.Fatalf("claim: %+v %v", r, err)
	}
	if err := s.Complete(t.Context(), c.Hold(), store.Completion{Result: res, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatalf("complete: %v", err)
	}
}

// TestLargeResults completes records whose results do not fit in an
// item as they are (400 KB, or WithMaxItemSize's 8 KiB), and checks how
// each was stored and that it replays as the package docs promise. None
// fails its completion, and every one keeps its head.
func TestLargeResults(t *testing.T) {
	client := newClient(t)
	table := newTable(t, client)
	s := newStore(t, client, table...)
	small := newStore(t, client, append(table, WithMaxItemSize(minItemSize))...)
	compressible := bytes.Repeat([]byte(`{"id":12345,"name":"a line of JSON that repeats"},`), 40_000) // 2 MB
	smallHead := head(40, []byte("Content-Type: application/json"))
	tests := []struct {
		name       string
		small      bool // on the store with 8 KiB items
		res        store.Result
		omitted    bool   // the body is left out: the head alone replays
		coding     string // the record's body_coding
		headCoding string // the record's headers_coding
		chunks     int    // the record's body_chunks
		overBound  bool   // the item is over the store's bound, not over 400 KB
	}{
		{name: "small stays raw", res: store.Result{Head: smallHead, Body: []byte("ok")}},
		{name: "compressible 2 MB is gzipped in the item", res: store.Result{Head: smallHead, Body: compressible}, coding: "gzip"},
		{name: "random 1 MiB goes into chunks", res: store.Result{Head: smallHead, Body: randomBytes(1 << 20)}, chunks: 3},
		{name: "random 5 MiB is omitted", res: store.Result{Head: smallHead, Body: randomBytes(5 << 20)}, omitted: true},
		{name: "omitted by the engine stays omitted", res: store.Result{Head: smallHead, BodyOmitted: true}, omitted: true},
		{name: "largest head stays raw", res: store.Result{Head: head(store.MaxHead, nil), Body: []byte("x")}},
		{name: "large head leaves no room for the body", small: true, res: store.Result{Head: head(4<<10, nil), Body: randomBytes(4 << 10)}, omitted: true},
		{name: "huge head is gzipped", small: true, res: store.Result{Head: head(store.MaxHead, []byte("X-Big: hhhh")), Body: randomBytes(1 << 10)},
			omitted: true, headCoding: "gzip"},
		{name: "incompressible huge head is kept past the bound", small: true, res: store.Result{Head: head(store.MaxHead, nil), Body: []byte("x")},
			omitted: true, overBound: true},
	}
	now := time.Now()
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, bound := s, MaxItemSize
			if tc.small {
				st, bound = small, minItemSize
			}
			key := "large-" + strconv.Itoa(i)
			complete(t, st, key, tc.res, now)
			want := tc.res
			if tc.omitted {
				want = store.Result{Head: tc.res.Head, BodyOmitted: true}
			}
			rec, found, err := st.Get(t.Context(), store.Ref{Scope: "s", Key: key}, now)
			if err != nil || !found {
				t.Fatalf("get: %v %v", found, err)
			}
			got := rec.Result
			if !bytes.Equal(got.Head, want.Head) || got.BodyOmitted != want.BodyOmitted || !bytes.Equal(got.Body, want.Body) {
				t.Fatalf("replayed %d head bytes (equal %v), omitted %v, %d body bytes; want %d, %v, %d",
					len(got.Head), bytes.Equal(got.Head, want.Head), got.BodyOmitted, len(got.Body), len(want.Head), want.BodyOmitted, len(want.Body))
			}
			item := rawItem(t, client, st, "s", key)
			d := decoder{item: item}
			if c := d.str("body_coding"); c != tc.coding {
				t.Errorf("body_coding %q, want %q", c, tc.coding)
			}
			if c := d.str("headers_coding"); c != tc.headCoding {
				t.Errorf("headers_coding %q, want %q", c, tc.headCoding)
			}
			if n := d.num("body_chunks", false); int(n) != tc.chunks {
				t.Errorf("body_chunks %d, want %d", n, tc.chunks)
			}
			if _, ok := item["status"]; ok {
				t.Errorf("a new item has a status attribute")
			}
			if size := itemSize(item); tc.overBound != (size > bound) || size > MaxItemSize {
				t.Errorf("item of %d bytes; want it over %d: %v", size, bound, tc.overBound)
			}
		})
	}
}

// TestEngineLargeResults puts responses through an engine's net/http
// middleware on a store with 8 KiB items: a body in chunks replays
// exactly; a body too large even for chunks is left out, and the replay
// keeps the status and the headers (without those that describe the
// body's bytes); a head too large for the item as it is is gzipped and
// replays whole.
func TestEngineLargeResults(t *testing.T) {
	client := newClient(t)
	s := newStore(t, client, append(newTable(t, client), WithMaxItemSize(minItemSize))...)
	e, err := idem.New(s, idem.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	bigHeader := hex.EncodeToString(randomBytes(3500)) // 7000 characters, gzip halves them
	bodies := map[string][]byte{"chunks": randomBytes(20 << 10), "omitted": randomBytes(900 << 10), "big-head": randomBytes(4 << 10)}
	var runs atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("POST /r/{name}", func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		name := r.PathValue("name")
		w.Header().Set("X-Order", name)
		w.Header().Set("ETag", `"v1"`)
		if name == "big-head" {
			w.Header().Set("X-Big", bigHeader)
		}
		w.WriteHeader(http.StatusCreated)
		w.Write(bodies[name])
	})
	srv := httptest.NewServer(e.Middleware()(mux))
	defer srv.Close()
	post := func(name string) (*http.Response, []byte) {
		req, _ := http.NewRequest("POST", srv.URL+"/r/"+name, strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "k-"+name)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	for _, name := range []string{"chunks", "omitted", "big-head"} {
		t.Run(name, func(t *testing.T) {
			if resp, body := post(name); resp.StatusCode != http.StatusCreated || !bytes.Equal(body, bodies[name]) {
				t.Fatalf("first request: %d, %d bytes", resp.StatusCode, len(body))
			}
			ran := runs.Load()
			resp, body := post(name)
			h := resp.Header
			if resp.StatusCode != http.StatusCreated || runs.Load() != ran || h.Get("Idempotent-Replayed") != "true" || h.Get("X-Order") != name {
				t.Fatalf("replay: %d after %d runs (%d before), headers %v", resp.StatusCode, runs.Load(), ran, h)
			}
			omitted := name == "omitted" || name == "big-head"
			if got := h.Get(idem.HeaderBodyOmitted) == "true"; got != omitted {
				t.Fatalf("replay: body omitted %v, want %v", got, omitted)
			}
			if omitted {
				if len(body) != 0 || h.Get("ETag") != "" {
					t.Fatalf("replay of an omitted body: %d bytes, ETag %q", len(body), h.Get("ETag"))
				}
			} else if !bytes.Equal(body, bodies[name]) || h.Get("ETag") != `"v1"` {
				t.Fatalf("replay: %d bytes, ETag %q; want the response", len(body), h.Get("ETag"))
			}
			if name == "big-head" && h.Get("X-Big") != bigHeader {
				t.Fatalf("replay: X-Big of %d characters, want %d", len(h.Get("X-Big")), len(bigHeader))
			}
			item := rawItem(t, client, s, idem.Scope("", "POST", "/r/{name}"), "k-"+name)
			d := decoder{item: item}
			if c := d.str("headers_coding"); (c == "gzip") != (name == "big-head") {
				t.Errorf("headers_coding %q", c)
			}
			if n := d.num("body_chunks", false); (n > 0) != (name == "chunks") {
				t.Errorf("body_chunks %d", n)
			}
		})
	}
}

// TestEmptyHead checks that a result without a head, which the engine
// never passes, is refused rather than stored unreadable.
func TestEmptyHead(t *testing.T) {
	client := newClient(t)
	s := newStore(t, client, newTable(t, client)...)
	now := time.Now()
	c := store.Claim{Scope: "s", Key: "k", Fingerprint: "fp", Token: "t", Now: now, LeaseEnd: now.Add(time.Minute)}
	if r, err := s.Claim(t.Context(), c); err != nil || !r.Acquired {
		t.Fatalf("claim: %+v %v", r, err)
	}
	if err := s.Complete(t.Context(), c.Hold(), store.Completion{Result: store.Result{Body: []byte("x")}, Now: now, ExpiresAt: now.Add(time.Hour)}); err == nil || errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("complete without a head: %v, want a failure", err)
	}
	if rec, _, err := s.Get(t.Context(), c.Ref(), now); err != nil || rec.State != store.InProgress {
		t.Fatalf("get: %v %v, want the claim in progress", rec.State, err)
	}
}

// TestSmallMaxItemSize runs the levels with WithMaxItemSize: a 20 KB
// body becomes chunks of under 8 KiB, and the claim replays it.
func TestSmallMaxItemSize(t *testing.T) {
	client := newClient(t)
	s := newStore(t, client, append(newTable(t, client), WithMaxItemSize(minItemSize))...)
	body := randomBytes(20 << 10)
	now := time.Now()
	c := store.Claim{Scope: "s", Key: "k", Fingerprint: "fp", Token: "t", Now: now, LeaseEnd: now.Add(time.Minute)}
	if r, err := s.Claim(t.Context(), c); err != nil || !r.Acquired {
		t.Fatalf("claim: %+v %v", r, err)
	}
	if err := s.Complete(t.Context(), c.Hold(), store.Completion{Result: store.Result{Head: []byte{1, 2}, Body: body}, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	c.Token = "t2"
	r, err := s.Claim(t.Context(), c)
	if err != nil || r.Acquired || !bytes.Equal(r.Existing.Result.Body, body) || !bytes.Equal(r.Existing.Result.Head, []byte{1, 2}) {
		t.Fatalf("claim again: acquired %v, err %v", r.Acquired, err)
	}
	if n := (&decoder{item: rawItem(t, client, s, "s", "k")}).num("body_chunks", false); n != 3 {
		t.Fatalf("%d chunks, want 3", n)
	}
}

// staleCondition is a client whose next claim (PutItem) fails its
// condition without reaching DynamoDB and without the item, as when the
// record that blocked it changed before Claim read it back: Claim then
// reads the item with GetItem.
type staleCondition struct {
	*dynamodb.Client
	n atomic.Int32
}

func (c *staleCondition) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if c.n.Add(-1) >= 0 {
		return nil, &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed")}
	}
	return c.Client.PutItem(ctx, in, opts...)
}

// TestExpiredChunks checks a completed record whose body is in chunk
// items, after its expiry, once DynamoDB's TTL has deleted a chunk but not
// yet the record (it deletes expired items lazily, in no order): Get
// reports it gone, and a Claim that reads it back takes the key over,
// without reading the chunks, rather than failing with ErrCorruptRecord.
// Before its expiry, the same record is corrupt.
func TestExpiredChunks(t *testing.T) {
	client := newClient(t)
	sc := &staleCondition{Client: client}
	s, err := New(sc, append(newTable(t, client, WithMaxItemSize(minItemSize)), WithKeyPrefix(randomName("t")+"#"))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	now := time.Now()
	expires := now.Add(time.Minute)
	c := store.Claim{Scope: "s", Key: "k", Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(time.Minute)}
	if r, err := s.Claim(ctx, c); err != nil || !r.Acquired {
		t.Fatalf("claim: %+v %v", r, err)
	}
	res := store.Result{Head: []byte{1, 2}, Body: randomBytes(20 << 10)}
	if err := s.Complete(ctx, c.Hold(), store.Completion{Result: res, Now: now, ExpiresAt: expires}); err != nil {
		t.Fatal(err)
	}
	if n := (&decoder{item: rawItem(t, client, s, "s", "k")}).num("body_chunks", false); n != 3 {
		t.Fatalf("%d chunks, want 3", n)
	}
	if _, err := client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(s.Table()), Key: s.chunkKey(s.Key("s", "k"), []byte(c.Token), 1),
	}); err != nil {
		t.Fatal(err)
	}

	if _, _, err := s.Get(ctx, c.Ref(), expires.Add(-time.Second)); !errors.Is(err, store.ErrCorruptRecord) {
		t.Fatalf("get before the expiry: %v, want ErrCorruptRecord", err)
	}
	after := expires.Add(time.Second)
	if rec, ok, err := s.Get(ctx, c.Ref(), after); err != nil || ok {
		t.Errorf("get after the expiry: %+v, found %v, %v; want gone", rec, ok, err)
	}
	sc.n.Store(1)
	next := store.Claim{Scope: "s", Key: "k", Fingerprint: "fp", Token: "tok2", Now: after, LeaseEnd: after.Add(time.Minute)}
	if r, err := s.Claim(ctx, next); err != nil || !r.Acquired {
		t.Fatalf("claim after the expiry, read back: %+v, %v; want acquired", r, err)
	}
}

// TestTTL checks the TTL attribute: an in-progress record is kept its
// lease end plus as long again as it has lasted, also after Extend; a
// completed one until it expires. CreateTable enabled TTL on it.
func TestTTL(t *testing.T) {
	client := newClient(t)
	table := newTable(t, client)
	s := newStore(t, client, table...)
	ctx := t.Context()
	created := time.Unix(1_900_000_000, 300_000_000)
	ttl := func() int64 { return (&decoder{item: rawItem(t, client, s, "s", "k")}).num("ttl", true) }
	c := store.Claim{Scope: "s", Key: "k", Fingerprint: "fp", Token: "t", Now: created, LeaseEnd: created.Add(15 * time.Second)}
	if r, err := s.Claim(ctx, c); err != nil || !r.Acquired {
		t.Fatalf("claim: %+v %v", r, err)
	}
	if got, want := ttl(), created.Add(30*time.Second).Unix()+1; got != want {
		t.Errorf("claim: ttl %d, want %d", got, want)
	}
	leaseEnd := created.Add(time.Minute + 700*time.Millisecond)
	if err := s.Extend(ctx, c.Hold(), created.Add(45*time.Second), leaseEnd); err != nil {
		t.Fatal(err)
	}
	if got, min := ttl(), keepUntil(created, leaseEnd); got < min.Unix() || got > min.Unix()+2 {
		t.Errorf("extend: ttl %d, want %d to %d", got, min.Unix(), min.Unix()+2)
	}
	expires := created.Add(24 * time.Hour)
	if err := s.Complete(ctx, c.Hold(), store.Completion{Result: store.Result{Head: []byte{1}}, Now: created, ExpiresAt: expires}); err != nil {
		t.Fatal(err)
	}
	if got := ttl(); got != expires.Unix()+1 {
		t.Errorf("complete: ttl %d, want %d (rounded up)", got, expires.Unix()+1)
	}
	out, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(s.Table())})
	if err != nil || out.TimeToLiveDescription == nil || aws.ToString(out.TimeToLiveDescription.AttributeName) != "ttl" ||
		out.TimeToLiveDescription.TimeToLiveStatus != types.TimeToLiveStatusEnabled {
		t.Fatalf("TTL: %+v %v", out.TimeToLiveDescription, err)
	}
	// CreateTable again leaves the table as it is.
	if err := s.CreateTable(ctx); err != nil {
		t.Fatalf("CreateTable on an existing table: %v", err)
	}
}

// TestCorruptRecord checks that an item no store wrote is refused with
// store.ErrCorruptRecord and left alone. (A legacy item whose header
// bytes are malformed is the engine's to refuse: see TestLegacyItems.)
func TestCorruptRecord(t *testing.T) {
	client := newClient(t)
	s := newStore(t, client, newTable(t, client)...)
	far := strconv.FormatInt(time.Now().Add(time.Hour).UnixNano(), 10)
	cases := map[string]map[string]types.AttributeValue{
		"bad state":            {"state": &types.AttributeValueMemberN{Value: "7"}, "expires_at": &types.AttributeValueMemberN{Value: far}, "fingerprint": attrB([]byte("f")), "created_at": attrN(1)},
		"completed, no head":   {"state": attrN(2), "body": attrB([]byte("b")), "expires_at": &types.AttributeValueMemberN{Value: far}, "fingerprint": attrB([]byte("f")), "created_at": attrN(1)},
		"bad gzip":             {"state": attrN(2), "headers": attrB([]byte{1}), "body": attrB([]byte("nope")), "body_coding": attrS("gzip"), "expires_at": &types.AttributeValueMemberN{Value: far}, "fingerprint": attrB([]byte("f")), "created_at": attrN(1)},
		"bad head gzip":        {"state": attrN(2), "headers": attrB([]byte("nope")), "headers_coding": attrS("gzip"), "expires_at": &types.AttributeValueMemberN{Value: far}, "fingerprint": attrB([]byte("f")), "created_at": attrN(1)},
		"unknown coding":       {"state": attrN(2), "headers": attrB([]byte{1}), "headers_coding": attrS("br"), "expires_at": &types.AttributeValueMemberN{Value: far}, "fingerprint": attrB([]byte("f")), "created_at": attrN(1)},
		"string state":         {"state": attrS("1"), "expires_at": &types.AttributeValueMemberN{Value: far}, "fingerprint": attrB([]byte("f")), "created_at": attrN(1)},
		"lost chunk":           {"state": attrN(2), "headers": attrB([]byte{1}), "body_chunks": attrN(2), "token": attrB([]byte("t")), "expires_at": &types.AttributeValueMemberN{Value: far}, "fingerprint": attrB([]byte("f")), "created_at": attrN(1)},
		"legacy string status": {"state": attrN(2), "status": attrS("200"), "headers": attrB([]byte{1, 0}), "expires_at": &types.AttributeValueMemberN{Value: far}, "fingerprint": attrB([]byte("f")), "created_at": attrN(1)},
		"legacy bad gzip":      {"state": attrN(2), "status": attrN(200), "body": attrB([]byte("nope")), "body_coding": attrS("gzip"), "expires_at": &types.AttributeValueMemberN{Value: far}, "fingerprint": attrB([]byte("f")), "created_at": attrN(1)},
		"legacy lost chunk":    {"state": attrN(2), "status": attrN(200), "body_chunks": attrN(2), "token": attrB([]byte("t")), "expires_at": &types.AttributeValueMemberN{Value: far}, "fingerprint": attrB([]byte("f")), "created_at": attrN(1)},
	}
	for name, item := range cases {
		t.Run(name, func(t *testing.T) {
			for k, v := range s.Key("s", name) {
				item[k] = v
			}
			if _, err := client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(s.Table()), Item: item}); err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			_, err := s.Claim(t.Context(), store.Claim{Scope: "s", Key: name, Fingerprint: "f", Token: "t2", Now: now, LeaseEnd: now.Add(time.Minute)})
			if !errors.Is(err, store.ErrCorruptRecord) {
				t.Fatalf("claim: %v, want ErrCorruptRecord", err)
			}
			if _, _, err := s.Get(t.Context(), store.Ref{Scope: "s", Key: name}, now); !errors.Is(err, store.ErrCorruptRecord) {
				t.Fatalf("get: %v, want ErrCorruptRecord", err)
			}
			if got := rawItem(t, client, s, "s", name); len(got) != len(item) {
				t.Fatalf("the item changed: %v", got)
			}
		})
	}
}

func TestOptions(t *testing.T) {
	client := &dynamodb.Client{}
	long := strings.Repeat("x", 256)
	tests := []struct {
		name string
		opts []Option
		ok   bool
	}{
		{"defaults", nil, true},
		{"single table", []Option{WithTable("app"), WithPartitionKey("PK"), WithSortKey("SK", "IDEM"), WithKeyPrefix("IDEM#")}, true},
		{"sort key prefix", []Option{WithSortKeyPrefix("SK", "")}, true},
		{"table ARN", []Option{WithTable("arn:aws:dynamodb:us-east-1:123456789012:table/idem")}, true},
		{"short table", []Option{WithTable("ab")}, false},
		{"table with space", []Option{WithTable("a b c")}, false},
		{"empty partition key", []Option{WithPartitionKey("")}, false},
		{"long partition key", []Option{WithPartitionKey(long)}, false},
		{"both sort key options", []Option{WithSortKey("SK", "x"), WithSortKeyPrefix("SK", "y")}, false},
		{"empty fixed sort value", []Option{WithSortKey("SK", "")}, false},
		{"sort key is partition key", []Option{WithSortKey("pk", "x")}, false},
		{"attribute is a key", []Option{WithAttributes(Attributes{Body: "pk"})}, false},
		{"attributes collide", []Option{WithAttributes(Attributes{Body: "token"})}, false},
		{"bad UTF-8 attribute", []Option{WithAttributes(Attributes{TTL: "\xff"})}, false},
		{"item size too small", []Option{WithMaxItemSize(1024)}, false},
		{"item size too large", []Option{WithMaxItemSize(MaxItemSize + 1)}, false},
		{"negative compression", []Option{WithCompressAbove(-1)}, false},
		{"nil option", []Option{nil}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(client, tc.opts...)
			if tc.ok != (err == nil) {
				t.Fatalf("New: %v, want ok %v", err, tc.ok)
			}
			if err != nil && (!errors.Is(err, ErrBadOption) || !errors.Is(err, idem.ErrBadOption)) {
				t.Fatalf("%v wraps neither ErrBadOption nor idem.ErrBadOption", err)
			}
		})
	}
	if _, err := New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

// FuzzDecodeRecord feeds decodeRecord items with arbitrary heads (or,
// with a status, legacy header bytes), bodies and codings: it must refuse
// what is not a record, never panic, and read a legacy item's head as
// store.LegacyHead does.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(int64(2), false, int64(0), []byte{1, 200, 1}, []byte("body"), "", "", int64(0))
	f.Add(int64(2), true, int64(200), []byte{1, 1, 1, 'A', 1, 1, 'b'}, []byte("body"), "", "", int64(0))
	f.Add(int64(2), true, int64(200), gzipped([]byte{1, 0}), gzipped([]byte("x")), "gzip", "gzip", int64(0))
	f.Add(int64(2), false, int64(0), []byte(nil), gzipped([]byte("x")), "gzip", "", int64(0))
	f.Add(int64(1), false, int64(0), []byte(nil), []byte(nil), "", "gzip", int64(3))
	s, err := New(&dynamodb.Client{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, state int64, legacy bool, status int64, header, body []byte, bodyCoding, headerCoding string, chunks int64) {
		item := map[string]types.AttributeValue{
			"fingerprint": attrB([]byte("f")), "token": attrB([]byte("t")), "state": attrN(state),
			"created_at": attrN(1), "lease_end": attrN(2), "expires_at": attrN(3), "headers": attrB(header), "body": attrB(body),
			"body_coding": attrS(bodyCoding), "headers_coding": attrS(headerCoding), "body_chunks": attrN(chunks),
		}
		if legacy {
			item["status"] = attrN(status)
		}
		rec, _, err := s.decodeRecord(item)
		if err != nil {
			if !errors.Is(err, store.ErrCorruptRecord) {
				t.Fatalf("error %v does not wrap ErrCorruptRecord", err)
			}
			return
		}
		if err := rec.Check(); err != nil {
			t.Fatalf("decoded a record that fails Check: %v", err)
		}
		if rec.State == store.Completed && headerCoding == "" {
			want := header
			if legacy {
				want = store.LegacyHead(int(status), header)
			}
			if !bytes.Equal(rec.Result.Head, want) {
				t.Fatalf("head %x, want %x", rec.Result.Head, want)
			}
		}
	})
}
