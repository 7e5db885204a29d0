package idemclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	idemclient "github.com/idemkit/idem/client"
)

// flakyOrders stands in for an idem server whose store blipped: it
// answers the first request with 503 and Retry-After: 0, then 201.
func flakyOrders() *httptest.Server {
	var n atomic.Int32
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "store unavailable", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"ord_1"}`)
	}))
}

func ExampleNewClient() {
	client, err := idemclient.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	client.Timeout = 30 * time.Second // every attempt and wait included
	resp, err := client.Post("https://api.example.com/orders", "application/json",
		strings.NewReader(`{"item":"book","quantity":2}`))
	if err != nil {
		log.Print(err) // sending it again later with the same key is still safe
		return
	}
	defer resp.Body.Close()
}

func ExampleNew() {
	// Bound each attempt with the base transport; a timeout is retried.
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.ResponseHeaderTimeout = 10 * time.Second
	t, err := idemclient.New(base,
		idemclient.WithMaxAttempts(4),
		idemclient.WithBudget(time.Minute),
	)
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: t}
	_ = client
}

func ExampleResultOf() {
	srv := flakyOrders()
	defer srv.Close()
	client, _ := idemclient.NewClient()

	resp, err := client.Post(srv.URL+"/orders", "application/json", strings.NewReader(`{"item":"book"}`))
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r, _ := idemclient.ResultOf(resp)
	fmt.Println(resp.StatusCode, string(body))
	fmt.Println("attempts:", r.Attempts, "replayed:", r.Replayed, "key is a UUID:", len(r.Key) == 36)
	// Output:
	// 201 {"id":"ord_1"}
	// attempts: 2 replayed: false key is a UUID: true
}

func ExampleWithOnAttempt() {
	srv := flakyOrders()
	defer srv.Close()
	client, _ := idemclient.NewClient(idemclient.WithOnAttempt(func(a idemclient.Attempt) {
		switch {
		case a.Err != nil:
			fmt.Printf("attempt %d: %v, retry %v in %v\n", a.Number, a.Err, a.Retry, a.Wait)
		default:
			fmt.Printf("attempt %d: %d, retry %v in %v\n", a.Number, a.Status, a.Retry, a.Wait)
		}
	}))

	req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(`{"item":"book"}`))
	req.Header.Set("Idempotency-Key", "order-7") // a key of your own is kept
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	// Output:
	// attempt 1: 503, retry true in 0s
	// attempt 2: 201, retry false in 0s
}

func ExampleWithInProgress() {
	// Also retry an API's own "still running" 409, keeping the default.
	inProgress := func(resp *http.Response, body []byte) bool {
		return idemclient.InProgress(resp, body) || strings.Contains(string(body), `"code":"REQUEST_IN_FLIGHT"`)
	}
	client, err := idemclient.NewClient(idemclient.WithInProgress(inProgress))
	if err != nil {
		log.Fatal(err)
	}
	_ = client
}

func ExampleError() {
	// A server that closes every connection without answering.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, _ := http.NewResponseController(w).Hijack()
		c.Close()
	}))
	defer srv.Close()
	client, _ := idemclient.NewClient(idemclient.WithMaxAttempts(3), idemclient.WithBackoff(time.Millisecond, time.Millisecond))

	_, err := client.Post(srv.URL+"/orders", "application/json", strings.NewReader("{}"))
	var e *idemclient.Error
	if errors.As(err, &e) {
		fmt.Println("attempts:", e.Attempts, "EOF:", errors.Is(err, io.EOF), "key kept for later:", e.Key != "")
	}
	// Output:
	// attempts: 3 EOF: true key kept for later: true
}

// A RetryPolicy retries another protocol's calls as the Transport retries
// HTTP requests. Here a call answers "busy" twice, then succeeds.
func ExampleRetryPolicy() {
	policy, err := idemclient.NewRetryPolicy(idemclient.WithMaxAttempts(4), idemclient.WithBackoff(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	errBusy := errors.New("busy")
	send := func(n int) error { // stands in for one attempt of the call
		if n < 3 {
			return errBusy
		}
		return nil
	}
	retries := policy.Begin(context.Background())
	for n := 1; ; n++ {
		err := send(n)
		wait, ok := retries.Next(errors.Is(err, errBusy), false, -1) // -1: the answer asks for no wait
		if !ok {
			fmt.Printf("attempts: %d, error: %v\n", n, err)
			break
		}
		if err := retries.Wait(wait); err != nil {
			log.Fatal(err)
		}
	}
	// Output: attempts: 3, error: <nil>
}
