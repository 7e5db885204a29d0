package dynamostore

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	idem "github.com/idemkit/idem/core"
)

// The benchmarks put a request through the engine (its net/http
// middleware, in process, on a Store) next to the cheapest DynamoDB call
// that could do its job on the same client: a first request next to one
// conditional PutItem, a replay next to one strongly consistent GetItem.
// Compare them as ratios; BenchmarkRatios interleaves all four so that
// load from other processes weighs on each alike:
//
//	go test -run '^$' -bench Ratios -benchtime 300x -count 6
//
// On dynalite a first request is two round trips (claim, complete) and a
// replay one, so the floors are 2 and 1.

var benchBody = []byte(`{"id":42,"item":"book","quantity":1,"status":"created","total":"12.50"}`)

// benchEnv is a Store, an engine in front of a small handler, and a
// second table for the baseline calls.
type benchEnv struct {
	client *dynamodb.Client
	h      http.Handler
	base   string // the baseline's table
}

func newBenchEnv(b *testing.B) *benchEnv {
	client := newClient(b)
	s := newStore(b, client, newTable(b, client)...)
	e, err := idem.New(s, idem.WithLogger(quietLog))
	if err != nil {
		b.Fatal(err)
	}
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(benchBody) //nolint:errcheck
	}))
	env := &benchEnv{client: client, h: h, base: ordersTable(nil, newTable(b, client))}
	env.post(b, "done") // the record replays read
	if _, err := client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &env.base,
		Item: map[string]types.AttributeValue{"pk": attrS("done"), "body": attrB(benchBody)}}); err != nil {
		b.Fatal(err)
	}
	return env
}

func (env *benchEnv) post(b *testing.B, key string) {
	req := httptest.NewRequest("POST", "/orders", nil)
	req.Header.Set("Idempotency-Key", key)
	rec := httptest.NewRecorder()
	env.h.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		body, _ := io.ReadAll(rec.Body)
		b.Fatalf("status %d: %s", rec.Code, body)
	}
}

func (env *benchEnv) putItem(b *testing.B, key string) {
	_, err := env.client.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName:           &env.base,
		Item:                map[string]types.AttributeValue{"pk": attrS(key), "body": attrB(benchBody)},
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	if err != nil {
		b.Fatal(err)
	}
}

// putFails is a conditional PutItem of the existing key with
// ReturnValuesOnConditionCheckFailure ALL_OLD: the call a replay's claim
// makes. On DynamoDB it is one request; scripts/dynalite-tx.js answers it
// with two calls to dynalite (the write, then a read of the item).
func (env *benchEnv) putFails(b *testing.B) {
	_, err := env.client.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName:                           &env.base,
		Item:                                map[string]types.AttributeValue{"pk": attrS("done"), "body": attrB(benchBody)},
		ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) || ccf.Item == nil {
		b.Fatalf("%v, want a failed condition with the item", err)
	}
}

func (env *benchEnv) getItem(b *testing.B) {
	out, err := env.client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: &env.base, Key: map[string]types.AttributeValue{"pk": attrS("done")}, ConsistentRead: aws.Bool(true),
	})
	if err != nil || out.Item == nil {
		b.Fatal(out, err)
	}
}

// BenchmarkPutItem is the baseline of a first request: one conditional
// PutItem of a new key.
func BenchmarkPutItem(b *testing.B) {
	env := newBenchEnv(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		env.putItem(b, strconv.Itoa(i))
	}
}

// BenchmarkFirstRequest is a request with a new key through the engine.
func BenchmarkFirstRequest(b *testing.B) {
	env := newBenchEnv(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		env.post(b, strconv.Itoa(i))
	}
}

// BenchmarkGetItem is the baseline of a replay: one consistent GetItem.
func BenchmarkGetItem(b *testing.B) {
	env := newBenchEnv(b)
	b.ReportAllocs()
	for b.Loop() {
		env.getItem(b)
	}
}

// BenchmarkReplay is a retry of a completed request through the engine.
func BenchmarkReplay(b *testing.B) {
	env := newBenchEnv(b)
	b.ReportAllocs()
	for b.Loop() {
		env.post(b, "done")
	}
}

// BenchmarkRatios interleaves the four operations above and putFails,
// rotating their order, and reports the ratios of their median
// latencies: first/put and replay/get are the figures to quote from a
// shared machine; replay/putfail sets a replay against the one call it
// makes, whatever the emulator does behind it.
func BenchmarkRatios(b *testing.B) {
	env := newBenchEnv(b)
	var put, first, get, replay, fails []time.Duration
	timed := func(into *[]time.Duration, f func()) func() {
		return func() {
			t0 := time.Now()
			f()
			*into = append(*into, time.Since(t0))
		}
	}
	for i := 0; b.Loop(); i++ {
		key := strconv.Itoa(i)
		ops := []func(){
			timed(&put, func() { env.putItem(b, key) }),
			timed(&first, func() { env.post(b, key) }),
			timed(&get, func() { env.getItem(b) }),
			timed(&replay, func() { env.post(b, "done") }),
			timed(&fails, func() { env.putFails(b) }),
		}
		for j := range ops {
			ops[(i+j)%len(ops)]()
		}
	}
	mp, mg := median(put), median(get)
	b.ReportMetric(float64(mp.Microseconds()), "put-median-µs")
	b.ReportMetric(float64(mg.Microseconds()), "get-median-µs")
	b.ReportMetric(float64(median(first))/float64(mp), "first/put")
	b.ReportMetric(float64(median(replay))/float64(mg), "replay/get")
	b.ReportMetric(float64(median(replay))/float64(median(fails)), "replay/putfail")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 1
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
