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
// Every step is atomic and costs one round trip, and a record is one
// Redis string written at most once per step:
//
//	step                      round trips  writes  under WithReplicas
//	Claim, new key            1            1       1, with WAIT
//	Claim, replay, 409, 422   1            0       1, its WAIT ignored
//	Complete                  1            1       1, with WAIT
//	Release                   1            1       1, no WAIT
//	Extend (the heartbeat)    1            1       1, with WAIT
//	Get                       1            0       1
//	Delete                    1            1       1, no WAIT
//
// Claim is a single SET key record NX PX ttl GET, which stores the claim
// or returns the record that blocks it; Complete, Release, Extend and
// Delete are each one Lua script, sent by its SHA-1 (its source is sent
// again only after a server restart or SCRIPT FLUSH); Get is one GET.
// A claim that finds a record that has ended by the engine's clock but
// is still in Redis (Redis removes it at the same moment by its own
// clock, so this takes clock skew) takes it over with the claim script,
// a second round trip. Lease and expiry checks use the times the engine
// passes in, never the server's clock. Each record also carries a Redis
// TTL that ends with it (the lease end while in progress, the end of
// retention once completed), so Redis reclaims expired records by itself
// and the Store needs no sweeper.
//
// A completed record holding a 1 KiB body and a few headers takes about
// 1.7 KB of Redis memory, an in-progress claim about 350 bytes (Redis
// 7.0 with jemalloc; TestMemoryPerRecord measures it).
//
// # Durability
//
// What a record survives depends on the Redis deployment; the Store
// configures neither persistence nor replication. A lost claim lets a
// duplicate run beside the request that held it; a lost completed
// record lets a retry run the handler again.
//
//	event                          what survives
//	the application crashes        every record; a claim in flight blocks
//	                               its key until its lease ends (15 s by
//	                               default), then the retry runs again
//	Redis restarts, no persistence nothing
//	  with RDB snapshots (save)    records older than the last snapshot
//	  with AOF, appendfsync        all but about the last second of
//	  everysec                     writes (two, when the disk lags)
//	  with AOF, appendfsync always every record: each write is on disk
//	                               before Redis answers it
//	a failover (Sentinel, Cluster) the records the promoted replica had:
//	                               the writes of the replication lag
//	                               (milliseconds, more under load) are lost
//	  with WithReplicas(n, ...)    every claim, completion and extension
//	                               the engine counted: each was
//	                               acknowledged by n replicas first (a
//	                               failover to one of them; see below)
//
// # Replication
//
// WithReplicas pipelines WAIT with each write the engine counts on: the
// claim of a new key, Complete and Extend. WAIT waits for the writes of
// its own connection, so it goes in the same pipeline (on Cluster, to the
// master that owns the key, not where a ClusterClient would send a
// keyless command) and costs the replication, not another round trip: a
// first request takes about 1.5 times as long on loopback
// (BenchmarkReplicasRatios).
//
// A claim that finds a record writes nothing. It carries the WAIT too,
// sent before the outcome is known, and ignores its answer: the replay
// is right whether or not the record has reached the replicas, and a
// WAIT after a read measures nothing reliable (Redis 7.0 counts every
// write the primary has made, so a replay there waits for the replicas
// to catch up, about twice a replay's time in the benchmark; later
// releases count only the connection's own writes). Release and Delete
// do not wait: a release lost in a failover leaves the claim, which
// blocks retries until its lease ends and never runs anything twice. An
// extension waits, so the new primary holds the last acknowledged lease
// end of a slow handler.
//
// A write that fewer than n replicas acknowledge within the timeout
// returns an error wrapping ErrNotReplicated, although it happened on the
// primary. For a claim the engine answers 503 before the handler runs
// and releases the claim in the background. For a completion the client
// gets its response, and the engine retries the completion in the
// background while it keeps the claim alive: a retry meanwhile replays
// the record from the primary, or, after a failover, gets 409 until the
// completion lands on the new primary, where the claim was acknowledged.
// Meeting the completed record again, Complete re-asserts its expiry (an
// unchanged write that WAIT then covers) and keeps failing until the
// replicas have the record, so the engine reports it landed only then.
// A completion still pending when the claim's acknowledged lease ends on
// the new primary, or when the application stops, is lost as without
// the option. While fewer than n replicas are connected every new
// request gets 503 after the timeout, and every replay waits it out
// (Redis checks the timeout on its hz tick, so up to 100 ms more by
// default).
//
// WAIT is not consensus. A record survives a failover to a replica that
// acknowledged it; Sentinel and Cluster promote the replica with the
// most data, which has it, unless replica-priority or an outage of that
// replica says otherwise. On Cluster these calls go through the master's
// own client (ClusterClient.MasterForKey), so hooks must be added with
// OnNewNode to see them, and a claim whose slot has just moved fails once
// while the slot map reloads.
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
// Replication in Redis is asynchronous: see Durability, and
// WithReplicas.
package redisstore
