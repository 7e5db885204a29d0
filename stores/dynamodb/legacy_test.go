package dynamostore

import (
	"bytes"
	"encoding/binary"
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
	"github.com/idemkit/idem/core/store"
)

// legacyHeader returns header bytes as stores kept them before results
// were opaque (format 1: the count of names, then each name with the
// count of its values and the values, lengths as uvarints), one value a
// name, names in the order given.
func legacyHeader(pairs ...string) []byte {
	b := []byte{1}
	b = binary.AppendUvarint(b, uint64(len(pairs)/2))
	for i := 0; i+1 < len(pairs); i += 2 {
		b = binary.AppendUvarint(b, uint64(len(pairs[i])))
		b = append(b, pairs[i]...)
		b = binary.AppendUvarint(b, 1)
		b = binary.AppendUvarint(b, uint64(len(pairs[i+1])))
		b = append(b, pairs[i+1]...)
	}
	return b
}

// legacyItem is a completed record as the Store wrote it before results
// were opaque: an HTTP status, the header bytes, the body.
type legacyItem struct {
	status               int
	header               []byte // nil: no headers attribute
	body                 []byte
	headerGzip, bodyGzip bool
	omitted              bool
	chunks               int // the body in this many chunk items
	wantHeader           http.Header
	corrupt              bool // the engine refuses it (malformed header bytes)
}

// TestLegacyItems writes records in the format of the Store before
// results were opaque straight into the table (PutItem), over records an
// engine wrote for the same requests (so that the fingerprints match),
// and reads them back through Get, through Claim's Existing and through
// an engine's net/http middleware, which replays the old status, headers
// and body without running the handler again.
func TestLegacyItems(t *testing.T) {
	client := newClient(t)
	s := newStore(t, client, newTable(t, client)...)
	e, err := idem.New(s, idem.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("X-Fresh", "yes")
		io.WriteString(w, "fresh")
	})
	h := e.Middleware()(mux)
	post := func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	scope := idem.Scope("", "POST", "/orders")
	jsonHeader := legacyHeader("Content-Type", "application/json", "X-Order", "42")
	jsonWant := http.Header{"Content-Type": {"application/json"}, "X-Order": {"42"}}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1024) // 16 KiB, in chunks
	cases := map[string]legacyItem{
		"headers and body":         {status: 201, header: jsonHeader, body: []byte(`{"id":42}`), wantHeader: jsonWant},
		"gzipped headers and body": {status: 201, header: jsonHeader, body: []byte(`{"id":42}`), headerGzip: true, bodyGzip: true, wantHeader: jsonWant},
		"no headers":               {status: 202, body: []byte("queued")},
		"empty header bytes":       {status: 200, header: []byte{1, 0}, body: []byte("ok")},
		"status alone, no body":    {status: 200, omitted: true},
		"headers, body omitted":    {status: 201, header: jsonHeader, omitted: true, wantHeader: jsonWant},
		"body in chunks":           {status: 201, header: jsonHeader, body: big, chunks: 2, wantHeader: jsonWant},
		"gzipped body in chunks":   {status: 200, header: jsonHeader, body: big, bodyGzip: true, chunks: 2, wantHeader: jsonWant},
		"malformed header bytes":   {status: 200, header: []byte{9, 9}, body: []byte("x"), corrupt: true},
		"header bytes cut short":   {status: 200, header: jsonHeader[:5], body: []byte("x"), corrupt: true},
		"status outside HTTP's":    {status: 7, header: jsonHeader, body: []byte("x"), corrupt: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			key := "legacy-" + strings.NewReplacer(" ", "-", ",", "").Replace(name)
			if rec := post(key); rec.Code != http.StatusOK || rec.Body.String() != "fresh" {
				t.Fatalf("first request: %d %q", rec.Code, rec.Body)
			}
			ran := runs.Load()
			ref := store.Ref{Scope: scope, Key: key}
			fresh := rawItem(t, client, s, scope, key)
			if fresh == nil {
				t.Fatalf("no item for the engine's record at scope %q", scope)
			}
			item := s.Key(scope, key)
			now := time.Now()
			expires, _ := nanos(now.Add(time.Hour))
			for _, a := range []string{"fingerprint", "token", "created_at", "created_s"} {
				item[a] = fresh[a]
			}
			item["state"] = attrN(2)
			item["expires_at"] = attrN(expires)
			item["ttl"] = attrN(ceilSec(now.Add(time.Hour)))
			item["status"] = attrN(int64(tc.status))
			if tc.header != nil {
				item["headers"] = attrB(tc.header)
				if tc.headerGzip {
					item["headers"], item["headers_coding"] = attrB(gzipped(tc.header)), attrS("gzip")
				}
			}
			body := tc.body
			if tc.bodyGzip {
				body = gzipped(body)
				item["body_coding"] = attrS("gzip")
			}
			if tc.omitted {
				item["body_omitted"] = &types.AttributeValueMemberBOOL{Value: true}
			}
			var puts []*dynamodb.PutItemInput
			switch {
			case tc.chunks > 0:
				item["body_chunks"] = attrN(int64(tc.chunks))
				size := (len(body) + tc.chunks - 1) / tc.chunks
				for i := range tc.chunks {
					c := s.chunkKey(s.Key(scope, key), fresh["token"].(*types.AttributeValueMemberB).Value, i)
					c["body"] = attrB(body[i*size : min(len(body), (i+1)*size)])
					c["ttl"] = item["ttl"]
					puts = append(puts, &dynamodb.PutItemInput{TableName: aws.String(s.Table()), Item: c})
				}
			case len(body) > 0:
				item["body"] = attrB(body)
			}
			puts = append(puts, &dynamodb.PutItemInput{TableName: aws.String(s.Table()), Item: item})
			for _, p := range puts {
				if _, err := client.PutItem(t.Context(), p); err != nil {
					t.Fatal(err)
				}
			}

			want := store.Result{Head: store.LegacyHead(tc.status, tc.header), Body: tc.body, BodyOmitted: tc.omitted}
			check := func(how string, rec store.Record) {
				t.Helper()
				got := rec.Result
				if rec.State != store.Completed || !bytes.Equal(got.Head, want.Head) || !bytes.Equal(got.Body, want.Body) || got.BodyOmitted != want.BodyOmitted {
					t.Fatalf("%s: state %v, head %x, %d body bytes, omitted %v; want head %x, %d bytes, omitted %v",
						how, rec.State, got.Head, len(got.Body), got.BodyOmitted, want.Head, len(want.Body), want.BodyOmitted)
				}
			}
			rec, found, err := s.Get(t.Context(), ref, now)
			if err != nil || !found {
				t.Fatalf("get: %v %v", found, err)
			}
			check("get", rec)
			fp := string(fresh["fingerprint"].(*types.AttributeValueMemberB).Value)
			r, err := s.Claim(t.Context(), store.Claim{Scope: scope, Key: key, Fingerprint: fp, Token: "another", Now: now, LeaseEnd: now.Add(time.Minute)})
			if err != nil || r.Acquired {
				t.Fatalf("claim: acquired %v, %v", r.Acquired, err)
			}
			check("claim's existing", *r.Existing)

			resp := post(key)
			if runs.Load() != ran {
				t.Fatalf("the handler ran again (%d runs, %d before)", runs.Load(), ran)
			}
			if tc.corrupt {
				if resp.Code != http.StatusServiceUnavailable {
					t.Fatalf("replay of a malformed record: %d %q, want 503", resp.Code, resp.Body)
				}
				if got := rawItem(t, client, s, scope, key); len(got) != len(item) {
					t.Fatalf("the malformed item changed: %v", got)
				}
				return
			}
			if resp.Code != tc.status {
				t.Fatalf("replay: status %d %q, want %d", resp.Code, resp.Body, tc.status)
			}
			if resp.Header().Get("X-Fresh") != "" || resp.Header().Get("Idempotent-Replayed") != "true" {
				t.Fatalf("replay: headers %v, want the old ones, replayed", resp.Header())
			}
			for name, vals := range tc.wantHeader {
				if got := resp.Header().Values(name); len(got) != len(vals) || got[0] != vals[0] {
					t.Fatalf("replay: header %s %q, want %q (all: %v)", name, got, vals, resp.Header())
				}
			}
			if tc.omitted {
				if resp.Body.Len() != 0 || resp.Header().Get(idem.HeaderBodyOmitted) != "true" {
					t.Fatalf("replay of an omitted body: %q, %s %q", resp.Body, idem.HeaderBodyOmitted, resp.Header().Get(idem.HeaderBodyOmitted))
				}
				return
			}
			if !bytes.Equal(resp.Body.Bytes(), tc.body) {
				t.Fatalf("replay: body %q, want %q", resp.Body, tc.body)
			}
		})
	}
}
