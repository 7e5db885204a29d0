package dynamostore

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	idem "github.com/idemkit/idem/core"
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

// TestLargeResponses completes records whose responses do not fit in a
// 400 KB item as they are, and checks how each was stored and that it
// replays as the package docs promise. None fails its completion.
func TestLargeResponses(t *testing.T) {
	client := newClient(t)
	table := newTable(t, client)
	s := newStore(t, client, table...)
	compressible := bytes.Repeat([]byte(`{"id":12345,"name":"a line of JSON that repeats"},`), 40_000) // 2 MB
	bigHeader := http.Header{"X-Rand": {string(randomBytes(450 << 10))}}
	tests := []struct {
		name     string
		resp     idem.Response
		want     idem.Response
		coding   string // the record's body_coding
		chunks   int    // the record's body_chunks
		noHeader bool   // the headers were dropped
	}{
		{name: "small stays raw", resp: idem.Response{Status: 200, Body: []byte("ok")}},
		{name: "compressible 2 MB is gzipped in the item", resp: idem.Response{Status: 200, Body: compressible}, coding: "gzip"},
		{name: "random 1 MiB goes into chunks", resp: idem.Response{Status: 201, Body: randomBytes(1 << 20)}, chunks: 3},
		{name: "random 5 MiB is omitted", resp: idem.Response{Status: 200, Header: http.Header{"A": {"b"}}, Body: randomBytes(5 << 20)},
			want: idem.Response{Status: 200, Header: http.Header{"A": {"b"}}, BodyOmitted: true}},
		{name: "huge headers are gzipped", resp: idem.Response{Status: 200, Header: http.Header{"X-Big": {strings.Repeat("h", 500<<10)}}, Body: randomBytes(1 << 10)},
			want: idem.Response{Status: 200, Header: http.Header{"X-Big": {strings.Repeat("h", 500<<10)}}, BodyOmitted: true}},
		{name: "incompressible huge headers are dropped", resp: idem.Response{Status: 202, Header: bigHeader, Body: []byte("x")},
			want: idem.Response{Status: 202, BodyOmitted: true}, noHeader: true},
	}
	now := time.Now()
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := "large-" + strconv.Itoa(i)
			r, err := s.Claim(t.Context(), idem.Claim{Scope: "s", Key: key, Fingerprint: "fp", Token: "tok-" + key, Now: now, LeaseEnd: now.Add(time.Minute)})
			if err != nil || !r.Acquired {
				t.Fatalf("claim: %+v %v", r, err)
			}
			if err := s.Complete(t.Context(), "s", key, "tok-"+key, tc.resp, now, now.Add(time.Hour)); err != nil {
				t.Fatalf("complete: %v", err)
			}
			want := tc.want
			if want.Status == 0 {
				want = tc.resp
			}
			rec, found, err := s.Get(t.Context(), "s", key, now)
			if err != nil || !found {
				t.Fatalf("get: %v %v", found, err)
			}
			got := rec.Response
			if got.Status != want.Status || got.BodyOmitted != want.BodyOmitted || !bytes.Equal(got.Body, want.Body) || len(got.Header) != len(want.Header) {
				t.Fatalf("replayed status %d, omitted %v, %d body bytes, %d headers; want %d, %v, %d, %d",
					got.Status, got.BodyOmitted, len(got.Body), len(got.Header), want.Status, want.BodyOmitted, len(want.Body), len(want.Header))
			}
			for name := range want.Header {
				if got.Header.Get(name) != want.Header.Get(name) {
					t.Fatalf("header %s differs", name)
				}
			}
			item := rawItem(t, client, s, "s", key)
			d := decoder{item: item}
			if c := d.str("body_coding"); c != tc.coding {
				t.Errorf("body_coding %q, want %q", c, tc.coding)
			}
			if n := d.num("body_chunks", false); int(n) != tc.chunks {
				t.Errorf("body_chunks %d, want %d", n, tc.chunks)
			}
			if size := itemSize(item); size > MaxItemSize {
				t.Errorf("item of %d bytes", size)
			}
		})
	}
}

// TestSmallMaxItemSize runs the levels with WithMaxItemSize: a 20 KB
// body becomes chunks of under 8 KiB, and the claim replays it.
func TestSmallMaxItemSize(t *testing.T) {
	client := newClient(t)
	s := newStore(t, client, append(newTable(t, client), WithMaxItemSize(minItemSize))...)
	body := randomBytes(20 << 10)
	now := time.Now()
	c := idem.Claim{Scope: "s", Key: "k", Fingerprint: "fp", Token: "t", Now: now, LeaseEnd: now.Add(time.Minute)}
	if r, err := s.Claim(t.Context(), c); err != nil || !r.Acquired {
		t.Fatalf("claim: %+v %v", r, err)
	}
	if err := s.Complete(t.Context(), "s", "k", "t", idem.Response{Status: 200, Body: body}, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	c.Token = "t2"
	r, err := s.Claim(t.Context(), c)
	if err != nil || r.Acquired || !bytes.Equal(r.Existing.Response.Body, body) {
		t.Fatalf("claim again: acquired %v, err %v", r.Acquired, err)
	}
	if n := (&decoder{item: rawItem(t, client, s, "s", "k")}).num("body_chunks", false); n != 3 {
		t.Fatalf("%d chunks, want 3", n)
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
	c := idem.Claim{Scope: "s", Key: "k", Fingerprint: "fp", Token: "t", Now: created, LeaseEnd: created.Add(15 * time.Second)}
	if r, err := s.Claim(ctx, c); err != nil || !r.Acquired {
		t.Fatalf("claim: %+v %v", r, err)
	}
	if got, want := ttl(), created.Add(30*time.Second).Unix()+1; got != want {
		t.Errorf("claim: ttl %d, want %d", got, want)
	}
	leaseEnd := created.Add(time.Minute + 700*time.Millisecond)
	if err := s.Extend(ctx, "s", "k", "t", created.Add(45*time.Second), leaseEnd); err != nil {
		t.Fatal(err)
	}
	if got, min := ttl(), keepUntil(created, leaseEnd); got < min.Unix() || got > min.Unix()+2 {
		t.Errorf("extend: ttl %d, want %d to %d", got, min.Unix(), min.Unix()+2)
	}
	expires := created.Add(24 * time.Hour)
	if err := s.Complete(ctx, "s", "k", "t", idem.Response{Status: 200}, created, expires); err != nil {
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
// idem.ErrCorruptRecord and left alone.
func TestCorruptRecord(t *testing.T) {
	client := newClient(t)
	s := newStore(t, client, newTable(t, client)...)
	far := strconv.FormatInt(time.Now().Add(time.Hour).UnixNano(), 10)
	cases := map[string]map[string]types.AttributeValue{
		"bad state":    {"state": &types.AttributeValueMemberN{Value: "7"}, "expires_at": &types.AttributeValueMemberN{Value: far}, "fingerprint": attrB([]byte("f")), "created_at": attrN(1)},
		"bad headers":  {"state": attrN(2), "status": attrN(200), "headers": attrB([]byte{9, 9}), "expires_at": &types.AttributeValueMemberN{Value: far}, "fingerprint": attrB([]byte("f")), "created_at": attrN(1)},
		"bad gzip":     {"state": attrN(2), "status": attrN(200), "body": attrB([]byte("nope")), "body_coding": attrS("gzip"), "expires_at": &types.AttributeValueMemberN{Value: far}, "fingerprint": attrB([]byte("f")), "created_at": attrN(1)},
		"string state": {"state": attrS("1"), "expires_at": &types.AttributeValueMemberN{Value: far}, "fingerprint": attrB([]byte("f")), "created_at": attrN(1)},
		"lost chunk":   {"state": attrN(2), "status": attrN(200), "body_chunks": attrN(2), "token": attrB([]byte("t")), "expires_at": &types.AttributeValueMemberN{Value: far}, "fingerprint": attrB([]byte("f")), "created_at": attrN(1)},
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
			_, err := s.Claim(t.Context(), idem.Claim{Scope: "s", Key: name, Fingerprint: "f", Token: "t2", Now: now, LeaseEnd: now.Add(time.Minute)})
			if !errors.Is(err, idem.ErrCorruptRecord) {
				t.Fatalf("claim: %v, want ErrCorruptRecord", err)
			}
			if _, _, err := s.Get(t.Context(), "s", name, now); !errors.Is(err, idem.ErrCorruptRecord) {
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

// FuzzDecodeRecord feeds decodeRecord items with arbitrary headers,
// bodies and codings: it must refuse what is not a record, never panic.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(int64(2), int64(200), idem.AppendHeader(nil, http.Header{"A": {"b"}}), []byte("body"), "", "", int64(0))
	f.Add(int64(2), int64(200), []byte{1, 0}, gzipped([]byte("x")), "gzip", "", int64(0))
	f.Add(int64(1), int64(0), []byte(nil), []byte(nil), "", "gzip", int64(3))
	s, err := New(&dynamodb.Client{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, state, status int64, header, body []byte, bodyCoding, headerCoding string, chunks int64) {
		item := map[string]types.AttributeValue{
			"fingerprint": attrB([]byte("f")), "token": attrB([]byte("t")), "state": attrN(state), "status": attrN(status),
			"created_at": attrN(1), "lease_end": attrN(2), "expires_at": attrN(3), "headers": attrB(header), "body": attrB(body),
			"body_coding": attrS(bodyCoding), "headers_coding": attrS(headerCoding), "body_chunks": attrN(chunks),
		}
		rec, _, err := s.decodeRecord(item)
		if err != nil {
			if !errors.Is(err, idem.ErrCorruptRecord) {
				t.Fatalf("error %v does not wrap ErrCorruptRecord", err)
			}
			return
		}
		if err := rec.Check(); err != nil {
			t.Fatalf("decoded a record that fails Check: %v", err)
		}
	})
}
