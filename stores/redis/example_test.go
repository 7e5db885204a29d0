package redisstore_test

import (
	"fmt"
	"log"
	"net/http"
	"time"

	idem "github.com/idemkit/idem/core"
	redisstore "github.com/idemkit/idem/stores/redis"
	"github.com/redis/go-redis/v9"
)

// A service whose POST /orders is safe to retry, with its idempotency
// records in Redis. It needs a Redis server, so it prints nothing.
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	engine, err := idem.New(store)
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintln(w, `{"id":42}`)
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", engine.Middleware()(mux)))
}

// On Redis Cluster, only the client changes. Every record lives in one
// hash slot, so the Store's scripts run on any shard.
func ExampleNew_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
		ContextTimeoutEnabled: true,
	})
	store, err := redisstore.New(client, redisstore.WithPrefix("orders:idem:"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	// Wait mode: a retry that arrives while the first request runs waits
	// for its response, woken through Redis Pub/Sub.
	engine, err := idem.New(store, idem.WithWait(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	_ = engine
}

// Behind Sentinel, with every claim and completion acknowledged by a
// replica before the engine counts it, so that a failover loses none.
// WithSentinel lets New read how long a failover takes from the
// Sentinels (down-after-milliseconds), and the engine's default lease
// outlasts it: 53 s at Sentinel's defaults.
func ExampleWithReplicas() {
	sentinel := &redis.FailoverOptions{
		MasterName:            "mymaster",
		SentinelAddrs:         []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
		ContextTimeoutEnabled: true,
	}
	client := redis.NewFailoverClient(sentinel)
	store, err := redisstore.New(client,
		redisstore.WithSentinel(sentinel),
		redisstore.WithReplicas(1, 100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	engine, err := idem.New(store)
	if err != nil {
		log.Fatal(err)
	}
	_ = engine
}

// A managed Redis that fails over behind one endpoint: the Store cannot
// read its timing, so the failover time its provider documents is
// stated, and the engine's lease is made to outlast it.
func ExampleWithFailoverTime() {
	client := redis.NewClient(&redis.Options{Addr: "primary.example.internal:6379", ContextTimeoutEnabled: true})
	store, err := redisstore.New(client, redisstore.WithFailoverTime(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	engine, err := idem.New(store)
	if err != nil {
		log.Fatal(err)
	}
	_ = engine
}
