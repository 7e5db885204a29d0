// Package redisstore is an [idem.Store] on Redis, through
// github.com/redis/go-redis/v9. Every instance of a service that shares one
// Redis shares its idempotency records, and the Store runs on a single
// Redis server, behind Sentinel, or on Redis Cluster.
//
// # Setup
//
// A single server:
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	store, err := redisstore.New(client)
//	if err != nil { ... }
//	defer store.Close()
//	engine, err := idem.New(store)
//
// The client must apply context deadlines to its network calls
// (ContextTimeoutEnabled: true), so the engine's store timeout bounds every
// call even when Redis hangs; New refuses a client that does not.
//
// Redis Cluster (or Sentinel, with redis.NewFailoverClient) takes nothing
// more than another client:
//
//	client := redis.NewClusterClient(&redis.ClusterOptions{
//		Addrs:                 []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
//		ContextTimeoutEnabled: true,
//	})
//	store, err := redisstore.New(client, redisstore.WithPrefix("orders:idem:"))
//
// # How records are kept
//
// A record is one Redis string at the key prefix + "{" + 32 hex digits +
// "}", the digits being a SHA-256 of the scope and the key. The braces are a
// hash tag: everything a record uses lives in one hash slot, so the scripts
// run unchanged on Cluster and records spread evenly over its shards. The
// response is kept byte for byte: status, every header value in order (not
// necessarily UTF-8), and any body bytes.
//
// Every step is atomic and costs one round trip. Claim is a single
// SET key record NX PX ttl GET, which stores the claim or returns the
// record that blocks it (a replay is that same command); Complete,
// Release, Extend and Delete are each one Lua script, sent by its SHA-1
// (its source is sent again only after a server restart or SCRIPT FLUSH);
// Get is one GET. A claim that finds a record that has ended by the
// engine's clock but is still in Redis (Redis removes it at the same
// moment by its own clock, so this takes clock skew) takes it over with
// the claim script, a second round trip. Lease and expiry checks use the
// times the engine passes in, never the server's clock. Each record also
// carries a Redis TTL that ends with it (the lease end while in progress,
// the end of retention once completed), so Redis reclaims expired records
// by itself and the Store needs no sweeper.
//
// # Waiting
//
// Complete, Release and Delete publish the record's hash tag on the
// channel prefix + "notify". Watch (the engine's wait mode) shares one
// subscription per Store among all waiters, so a thousand waiting requests
// use one connection. If the subscription breaks, waiters are woken early
// and re-check the record; the Store resubscribes by itself. Watch never
// blocks on the subscription: a watch taken while it is down is woken when
// it is back.
//
// Times must lie between 1677-09-21 and 2262-04-11 (Unix nanoseconds in an
// int64); a call with a time outside that range fails. A record's Redis TTL
// saturates at about 292 years.
//
// # Operating Redis
//
// The Store needs Redis 7.0 or later: a claim is a SET with both NX and
// GET.
//
// Records must not be evicted: an evicted record lets its request run
// again, and an evicted claim lets a duplicate run beside it. Every
// record has a TTL, so the volatile-* policies reach them as surely as
// the allkeys-* ones (volatile-ttl takes the claims in flight first).
// New therefore refuses, with ErrEvictionPolicy, a server whose
// maxmemory-policy is not noeviction while maxmemory is set; it warns
// once through WithLogger's logger, and goes on, when the policy evicts
// but maxmemory is 0 (nothing is evicted until it is set), and when it
// cannot ask (Redis unreachable, or CONFIG refused, as managed services
// may). The check is made at New only, on the masters then in use. Under
// noeviction a full Redis refuses writes and the engine answers 503.
// Replication in Redis is asynchronous: after a failover, a claim or a
// response written just before it may be lost, and the request it guarded
// may run again.
package redisstore
