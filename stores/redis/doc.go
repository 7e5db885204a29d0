// Package redisstore is an idem store (a store.Store) on Redis, through
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
// Redis Cluster takes nothing more than another client; New reads every
// node's cluster-node-timeout to learn how long a failover may take (see
// Failover):
//
//	client := redis.NewClusterClient(&redis.ClusterOptions{
//		Addrs:                 []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
//		ContextTimeoutEnabled: true,
//	})
//	store, err := redisstore.New(client, redisstore.WithPrefix("orders:idem:"))
//
// Behind Sentinel, New also needs the Sentinels, which it cannot reach
// through the failover client: pass the options the client was built
// with.
//
//	sentinel := &redis.FailoverOptions{
//		MasterName:            "mymaster",
//		SentinelAddrs:         []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
//		ContextTimeoutEnabled: true,
//	}
//	client := redis.NewFailoverClient(sentinel)
//	store, err := redisstore.New(client, redisstore.WithSentinel(sentinel),
//		redisstore.WithReplicas(1, 100*time.Millisecond))
//
// A managed service that fails over behind one address, or one whose
// CONFIG is refused, takes the failover time its provider documents:
// redisstore.WithFailoverTime(time.Minute).
//
// # How records are kept
//
// A record is one Redis string at the key prefix + "{" + 32 hex digits +
// "}", the digits being a SHA-256 of the scope and the key. The braces are a
// hash tag: everything a record uses lives in one hash slot, so the scripts
// run unchanged on Cluster and records spread evenly over its shards. The
// outcome is kept byte for byte as the engine encoded it (store.Result:
// its Head, with an HTTP response's status and headers, and its Body); the
// Store never reads it.
//
// Every step is atomic and costs one round trip (taking an ended claim
// over, two), and a record is one Redis string written at most once per
// step:
//
//	step                      round trips  writes  under WithReplicas
//	Claim, new key            1            1       1, with WAIT
//	Claim, replay, 409, 422   1            0       1, its WAIT ignored
//	Claim, ended claim        2            1       2, with WAIT
//	Complete                  1            1       1, with WAIT
//	Release                   1            1       1, no WAIT
//	Extend (the heartbeat)    1            1       1, with WAIT
//	Evict                     1            1       1, no WAIT
//	Get                       1            0       1
//	Delete                    1            1       1, no WAIT
//	Now (the engine's clock)  1            0       1, once a minute
//	Watch, subscription up    1            0 or 1  1, no WAIT
//
// Claim is a single SET key record NX PX ttl GET, which stores the claim
// or returns the record that blocks it; Complete, Release, Extend,
// Evict, Delete and Now are each one Lua script, sent by its SHA-1 (its
// source is sent again only after a server restart or SCRIPT FLUSH); Get
// is one GET. A claim that finds a record that has ended by the engine's
// clock but is still in Redis (an abandoned claim, which Redis keeps a
// lease past its lease end; or clock skew) takes it over with the claim
// script, a second round trip. Lease and expiry checks use the times the
// engine passes in, never the server's clock.
//
// go-redis sends a command again when its connection breaks after the
// command went out, so a claim whose reply was lost may find the record
// its first attempt stored. A record in progress that holds the claim's
// token (random per claim) is that record, and the claim is reported
// acquired, not blocked by itself; under WithReplicas its expiry is then
// set again, unchanged, with WAIT (a second round trip), since the WAIT
// of an attempt that wrote nothing counts nothing.
//
// Each record also carries a Redis TTL, so Redis reclaims it by itself
// and the Store needs no sweeper: a completed record's ends with its
// retention; an in-progress record's at LeaseEnd + (LeaseEnd -
// CreatedAt), a lease past its lease end. A claim whose lease ended
// while nobody took the key over is still its token's: a Complete or
// Extend that comes late, because Redis was away or failing over, finds
// it and lands; a claim at or after the lease end takes the key over,
// after which the late call fails with store.ErrLeaseLost. A completed
// record keeps the claim's token, so that Evict (a token-checked delete
// of a record whose streamed answer turned out truncated) never deletes
// the record of a retry that claimed the key after it expired.
//
// Now is Redis's TIME, which the engine aligns the times it passes in
// with (store.Clock), so that instances whose clocks disagree judge leases
// alike. Its script names the key prefix + "clock" (never written): every
// engine reads the same server, on a Cluster the master that owns that
// key's slot. One clock is enough there: the records of every shard hold
// the engine's times, and the scripts compare them with the engine's now,
// never with a server's clock; the other masters only count TTLs down,
// from when each write arrives, which their clocks' offset does not
// change.
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
//	                               its key until its lease ends, then the
//	                               retry runs again
//	Redis restarts, no persistence nothing
//	  with RDB snapshots (save)    records older than the last snapshot
//	  with AOF, appendfsync        all but about the last second of
//	  everysec                     writes (two, when the disk lags)
//	  with AOF, appendfsync always every record: each write is on disk
//	                               before Redis answers it; a completion
//	                               that waited out the restart lands if
//	                               the restart took less than the lease
//	                               (less a heartbeat), or after it while
//	                               no retry came first
//	a failover (Sentinel, Cluster) the records the promoted replica had;
//	                               the engine's lease outlasts the
//	                               failover (see Failover), so a
//	                               completion that waited it out in the
//	                               background lands on the new primary
//	                               and retries replay it
//	  without WithReplicas         the writes of the replication lag
//	                               (milliseconds, more under load) are
//	                               lost: a lost claim lets the retry run
//	                               beside the first request, a lost
//	                               completion lets it run again after the
//	                               lease
//	  with WithReplicas(n, ...)    every claim, completion and extension
//	                               the engine counted: each was
//	                               acknowledged by n replicas first (a
//	                               failover to one of them; see below)
//	  longer than FailoverTime     what the promoted replica had; a retry
//	                               that comes after the lease end and
//	                               before the late completion lands runs
//	                               again
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
// The engine's lease outlasts the failover (see Failover), so the claim
// is still live on the new primary when the pending completion lands
// there; one that comes later still lands while no retry has taken the
// key over. A completion still pending when the application stops is
// lost as without the option. While fewer than n replicas are connected
// every new request gets 503 after the timeout, and every replay waits
// it out (Redis checks the timeout on its hz tick, so up to 100 ms more
// by default): after a failover, until the new primary has a replica
// (Sentinel and Cluster attach the other replicas to it within seconds;
// keep two replicas per primary for that).
//
// WAIT is not consensus. A record survives a failover to a replica that
// acknowledged it; Sentinel and Cluster promote the replica with the
// most data, which has it, unless replica-priority or an outage of that
// replica says otherwise. On Cluster these calls go through the master's
// own client (ClusterClient.MasterForKey), so hooks must be added with
// OnNewNode to see them, and a claim whose slot has just moved fails once
// while the slot map reloads.
//
// # Failover
//
// While a primary is down and until a replica is promoted, every call
// to it fails: handlers that finish meanwhile answer their clients, and
// the engine completes their records in the background. That only
// works if their claims are still held when the new primary takes
// over, so the Store reports how long a failover may take
// (store.FailoverBound), and idem.New makes the default lease outlast it
// and refuses a shorter WithLease: two heartbeat intervals, the failover
// and the store timeout fit in the lease, so a failover that begins just
// before a beat ends, and the next beat lands, before the claim does
// (the engine then beats every (lease - FailoverTime - store timeout)/2:
// 8 s at Sentinel's defaults, 7 s at Cluster's). The price is
// the lease: the claims of an application instance that crashes block
// their keys that long (53 s instead of 15 s behind a default
// Sentinel). New finds the bound:
//
//	deployment             FailoverTime                      at the defaults
//	Sentinel, WithSentinel largest down-after-milliseconds   35 s (lease 53 s)
//	                       + 5 s
//	Cluster                2 x largest cluster-node-timeout  32 s (lease 48 s)
//	                       + 2 s
//	WithFailoverTime(d)    d                                 -
//	one server, Ring       0: a restart is not a failover    - (lease 15 s)
//
// Sentinel flags the primary down after down-after-milliseconds without
// a reply, agrees with the quorum within a second, starts after up to a
// second's random delay, and promotes within another: 30.5 to 30.6 s
// measured on loopback at the default 30 s. A Cluster flags a master
// PFAIL once a ping has waited cluster-node-timeout, pings each node at
// least every half of it, needs a majority's reports, which ride the
// same pings, and the replica's election takes 0.5 to 1 s: 19.4 to
// 23.5 s measured at the default 15 s, up to 2 x node timeout when a
// machine vanishes without closing its connections.
// (TestSentinelKillNeverTwice and TestClusterKillNeverTwice kill the
// primary with SIGKILL at these defaults while requests are in flight;
// no request runs twice.)
//
// New refuses, with ErrFailoverUnknown, a client that follows failovers
// whose timing it cannot read: a Sentinel failover client without
// WithSentinel or WithFailoverTime, a ClusterClient with ClusterSlots
// (redis.NewFailoverClusterClient), a Cluster whose nodes do not all
// answer CONFIG GET. Refusing at start-up says why, once; a guessed bound
// would run requests twice at the first failover that exceeds it. On a
// single server New warns when it has replicas: something may fail it
// over behind its address, and only WithFailoverTime can say how long
// that takes. The timings are read at New only.
//
// The bound covers a failover that succeeds at its first attempt. One
// that fails (the elected Sentinel or the chosen replica dies too, a
// split vote) is tried again after twice Sentinel's failover-timeout (6
// minutes by default) or 4 x cluster-node-timeout, which no lease
// outlasts: a request in flight then may run again. Two replicas of a
// Cluster master with the same data can split the masters' votes (once
// in eleven test runs: promoted 80.4 s after the kill);
// cluster-replica-no-failover on all but one replica of each master
// avoids that, at the price of that one replica.
//
// # Waiting
//
// Notifications are paid for only when someone waits. Watch (the
// engine's wait mode) marks the record as waited for, one script call:
// a small key beside the record (its key + "w", in the same hash slot,
// with the record's TTL). Complete, Release, Evict and Delete publish the
// record's hash tag on the channel prefix + "notify" only when that mark
// is there, and delete it; a request nobody waits for publishes nothing
// and costs the two commands of the table above. The mark script returns
// the record's state, and a waiter that finds the claim already ended is
// woken at once, so no ending is missed between the engine's look at the
// record and the mark. Watch shares one subscription per Store among all
// waiters, so a thousand waiting requests use one connection. If the
// subscription breaks, waiters are woken early and re-check the record;
// the Store resubscribes by itself. Watch never blocks on the
// subscription: a watch taken while it is down marks nothing and is woken
// when it is back, when the engine watches (and marks) again.
//
// The record's format did not change with the mark. Instances of an
// earlier version, which publish for every record and never mark, can run
// beside this one during an upgrade: their waiters are not published to
// by this version's completions and find the record by polling (the
// engine's backoff, up to half a second); nothing runs twice.
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
//
// Records completed by this version keep their claim's token. Releases
// that did not keep it report such a record corrupt, and answer its
// retries with 503 (never running them), until every instance runs
// this version; records they completed are read as before.
//
// Records completed by this version keep an opaque result (a format byte,
// then the engine's Head and Body) where earlier releases kept an HTTP
// status, headers and body. Those earlier records keep reading: the Store
// turns their status and headers into a Head with store.LegacyHead, and
// the engine replays them as before. Earlier releases report the new
// records corrupt and answer their retries with 503 (never running them)
// until every instance runs this version; the scripts did not change, so
// claims, releases and extensions work across versions.
package redisstore
