package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/redis/go-redis/v9"
)

// This file finds how long a failover of the deployment behind the
// client may take (store.FailoverBound): the engine sets its lease from
// it, so that a claim is still held when the promoted replica takes over
// and the completion that waited out the failover lands on it.

// ErrFailoverUnknown is wrapped by the error New returns when the client
// follows a failover (a Sentinel failover client, or a Cluster) whose
// timing the Store cannot read: give WithSentinel or WithFailoverTime.
var ErrFailoverUnknown = errors.New("redisstore: cannot tell how long a failover of Redis takes")

// Margins of the failover bounds, on top of the timeout that starts the
// failover; see sentinelBound and clusterBound.
const (
	sentinelMargin = 5 * time.Second
	clusterMargin  = 2 * time.Second
)

// sentinelBound returns how long a Sentinel failover may take when every
// Sentinel's down-after-milliseconds is at most downAfter. From the kill
// of the primary (sentinel.c): each Sentinel pings it every second and
// flags it down (SDOWN) once its oldest unanswered ping is downAfter old,
// at most 1 s + downAfter after the kill; it asks the others every second
// until a quorum agrees (ODOWN), up to 1 s more; it starts the failover
// after a random delay of up to 1 s (SENTINEL_MAX_DESYNC) and wins the
// vote in one round trip; the leader sends REPLICAOF NO ONE on its next
// tick and sees the promotion with the INFO it sends every second; the
// client follows +switch-master at once, or asks the Sentinels at its
// next connection. That is downAfter + about 4.5 s: the margin is 5 s.
// Measured on loopback at the defaults (downAfter 30 s): 30.5 to 30.6 s
// (TestSentinelKillNeverTwice).
//
// A failover whose first attempt fails (the elected Sentinel or the
// chosen replica dies meanwhile) is tried again only after twice the
// failover-timeout (6 minutes by default), which no lease outlasts; see
// the package documentation, Durability.
func sentinelBound(downAfter time.Duration) time.Duration {
	return downAfter + sentinelMargin
}

// clusterBound returns how long a Cluster failover may take when every
// node's cluster-node-timeout is at most nodeTimeout. From the Redis
// Cluster specification, for a master that stops answering: a node flags
// it PFAIL once a ping to it has waited nodeTimeout, and every node pings
// every other at least every nodeTimeout/2 (a crashed process closes its
// connections and is pinged at once; a machine that vanishes may be
// pinged only then): at most 1.5 × nodeTimeout. It is flagged FAIL once a
// majority of masters report it, in the gossip of the pings every pair
// exchanges at least every nodeTimeout/2: up to nodeTimeout/2 more. Its
// best replica then waits 500 to 1000 ms (plus 1 s for each replica with
// more data than itself, none for the best one), wins the masters' votes
// in one round trip, and clients follow the redirections that name it.
// That is 2 × nodeTimeout + about 1.5 s: the margin is 2 s. Measured on
// loopback at the default nodeTimeout 15 s, killing the process: 19.4 s
// to 23.5 s (TestClusterKillNeverTwice; 18.4 s in issue 16), against a
// bound of 32 s.
//
// An election that fails (a split vote) is retried after 4 ×
// nodeTimeout, which no lease outlasts.
func clusterBound(nodeTimeout time.Duration) time.Duration {
	return 2*nodeTimeout + clusterMargin
}

// WithFailoverTime states how long a failover of the Redis deployment
// may take, from the primary's loss until the client writes to the
// promoted replica, instead of letting New read it (see New). The engine
// sets its default lease to outlast it and refuses a shorter WithLease
// (store.FailoverBound). 0 states that nothing fails over: a single
// server, which a restart brings back, or a deployment whose failovers
// you accept may run a request twice.
//
// Give it where New cannot read the timing: a Sentinel failover client
// without WithSentinel, a Cluster whose CONFIG is refused (as managed
// services may), a client with ClusterSlots, or a managed service that
// fails over behind one address (count its documented failover time).
// d must be between 0 and idem.MaxLifetime. It cannot be combined with
// WithSentinel.
func WithFailoverTime(d time.Duration) Option {
	return func(o *options) { o.failover, o.failoverSet = d, true }
}

// WithSentinel gives the Sentinels that manage the primary the client
// follows, as the redis.FailoverOptions the client was built with (their
// SentinelAddrs, MasterName, SentinelUsername, SentinelPassword,
// TLSConfig, Dialer and timeouts are used). New asks each Sentinel for
// the master's down-after-milliseconds (SENTINEL MASTER), at most 2 s,
// and derives how long a failover may take from the largest: down-after
// plus 5 s, the time Sentinel takes to agree, elect a leader and promote
// a replica. New fails when no Sentinel answers or one does not know the
// master, and warns when some do not answer. The timing is read at New
// only.
//
// A failover client (redis.NewFailoverClient, or NewUniversalClient with
// MasterName) needs it or WithFailoverTime: the Store cannot reach the
// Sentinels through that client.
func WithSentinel(opt *redis.FailoverOptions) Option {
	return func(o *options) { o.sentinel, o.sentinelSet = opt, true }
}

// validateFailover checks WithFailoverTime and WithSentinel.
func (o *options) validateFailover() error {
	switch {
	case o.failoverSet && o.sentinelSet:
		return fmt.Errorf("%w: WithFailoverTime and WithSentinel both say how long a failover takes; give one", ErrBadOption)
	case o.failoverSet && (o.failover < 0 || o.failover > idem.MaxLifetime):
		return fmt.Errorf("%w: WithFailoverTime: %v is not between 0 and %v", ErrBadOption, o.failover, idem.MaxLifetime)
	case o.sentinelSet && o.sentinel == nil:
		return fmt.Errorf("%w: WithSentinel: the options are nil", ErrBadOption)
	case o.sentinelSet && o.sentinel.MasterName == "":
		return fmt.Errorf("%w: WithSentinel: no MasterName", ErrBadOption)
	case o.sentinelSet && len(o.sentinel.SentinelAddrs) == 0:
		return fmt.Errorf("%w: WithSentinel: no SentinelAddrs", ErrBadOption)
	}
	return nil
}

// isFailoverClient reports whether c is a Sentinel failover client:
// redis.NewFailoverClient builds a *redis.Client whose Options().Addr is
// this placeholder, its dialer asking the Sentinels for the primary.
func isFailoverClient(c *redis.Client) bool {
	return c.Options().Addr == "FailoverClient"
}

// failoverTime returns how long a failover of the deployment behind
// client may take, from WithFailoverTime, from the Sentinels of
// WithSentinel, or from the Cluster's nodes; 0 for a single server or a
// Ring. It returns an error wrapping ErrFailoverUnknown when the client
// follows failovers whose timing it cannot read.
func failoverTime(client redis.UniversalClient, o *options, logger *slog.Logger) (time.Duration, error) {
	if o.failoverSet {
		return o.failover, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if o.sentinelSet {
		return readSentinels(ctx, o.sentinel, logger)
	}
	switch c := client.(type) {
	case *redis.Client:
		if isFailoverClient(c) {
			return 0, fmt.Errorf("%w: the client is a Sentinel failover client, and the Store cannot reach the Sentinels through it to read down-after-milliseconds; "+
				"pass the client's redis.FailoverOptions with WithSentinel, or state the failover time with WithFailoverTime. "+
				"Without it the engine's lease could end during a failover (30 s and more at Sentinel's defaults), and a request in flight would run twice", ErrFailoverUnknown)
		}
		warnReplicas(ctx, c, logger)
		return 0, nil
	case *redis.ClusterClient:
		if c.Options().ClusterSlots != nil {
			return 0, fmt.Errorf("%w: the ClusterClient takes its slots from ClusterSlots (as redis.NewFailoverClusterClient does), not from a Redis Cluster whose cluster-node-timeout the Store could read; "+
				"give WithSentinel or WithFailoverTime", ErrFailoverUnknown)
		}
		return readCluster(ctx, c)
	}
	return 0, nil
}

// readSentinels asks every Sentinel of opt for its master's
// down-after-milliseconds and returns sentinelBound of the largest.
func readSentinels(ctx context.Context, opt *redis.FailoverOptions, logger *slog.Logger) (time.Duration, error) {
	type answer struct {
		addr      string
		downAfter time.Duration
		err       error
		refused   bool // the Sentinel answered with an error
	}
	answers := make([]answer, len(opt.SentinelAddrs))
	var wg sync.WaitGroup
	for i, addr := range opt.SentinelAddrs {
		wg.Go(func() {
			a := &answers[i]
			a.addr = addr
			sc := redis.NewSentinelClient(&redis.Options{
				Addr:                  addr,
				Dialer:                opt.Dialer,
				Username:              opt.SentinelUsername,
				Password:              opt.SentinelPassword,
				TLSConfig:             opt.TLSConfig,
				DialTimeout:           opt.DialTimeout,
				ReadTimeout:           opt.ReadTimeout,
				WriteTimeout:          opt.WriteTimeout,
				MaxRetries:            -1,
				ContextTimeoutEnabled: true,
			})
			defer sc.Close()
			m, err := sc.Master(ctx, opt.MasterName).Result()
			if err != nil {
				var rerr redis.Error
				a.err, a.refused = err, errors.As(err, &rerr)
				return
			}
			a.downAfter, a.err = millis(m, "down-after-milliseconds")
			a.refused = a.err != nil
		})
	}
	wg.Wait()
	var downAfter time.Duration
	var unreachable, refused []string
	for _, a := range answers {
		switch {
		case a.refused:
			refused = append(refused, fmt.Sprintf("%s: %v", a.addr, a.err))
		case a.err != nil:
			unreachable = append(unreachable, fmt.Sprintf("%s: %v", a.addr, a.err))
		default:
			downAfter = max(downAfter, a.downAfter)
		}
	}
	switch {
	case len(refused) > 0:
		return 0, fmt.Errorf("%w: WithSentinel: SENTINEL MASTER %s: %s", ErrFailoverUnknown, opt.MasterName, strings.Join(refused, "; "))
	case len(unreachable) == len(answers):
		return 0, fmt.Errorf("%w: WithSentinel: no Sentinel answered SENTINEL MASTER %s: %s; give WithFailoverTime to start without asking them", ErrFailoverUnknown, opt.MasterName, strings.Join(unreachable, "; "))
	case len(unreachable) > 0:
		logger.Warn("redisstore: some Sentinels did not answer; the failover time comes from the others' down-after-milliseconds",
			slog.String("master", opt.MasterName), slog.String("why", strings.Join(unreachable, "; ")))
	}
	return sentinelBound(downAfter), nil
}

// readCluster asks every node of the cluster that the client knows,
// masters and replicas, for its cluster-node-timeout and returns
// clusterBound of the largest. The masters' decides when a failure is
// detected; a replica's, when it tries an election again.
func readCluster(ctx context.Context, c *redis.ClusterClient) (time.Duration, error) {
	var mu sync.Mutex
	var nodeTimeout time.Duration
	var failed []string
	err := c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
		m, err := n.ConfigGet(ctx, "cluster-node-timeout").Result()
		var d time.Duration
		if err == nil {
			d, err = millis(m, "cluster-node-timeout")
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", n.Options().Addr, err))
		}
		nodeTimeout = max(nodeTimeout, d)
		return nil
	})
	if err != nil {
		failed = append(failed, err.Error())
	}
	if len(failed) > 0 {
		return 0, fmt.Errorf("%w: reading cluster-node-timeout (CONFIG GET): %s; give WithFailoverTime to state it (Redis's default failover takes up to %v)",
			ErrFailoverUnknown, strings.Join(failed, "; "), clusterBound(15*time.Second))
	}
	return clusterBound(nodeTimeout), nil
}

// millis reads a count of milliseconds from a CONFIG GET or SENTINEL
// MASTER reply.
func millis(m map[string]string, name string) (time.Duration, error) {
	v, ok := m[name]
	if !ok {
		return 0, fmt.Errorf("no %s in the reply", name)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > int64(idem.MaxLifetime/time.Millisecond) {
		return 0, fmt.Errorf("%s %q is not a count of milliseconds", name, v)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// warnReplicas warns when the single server behind c has replicas: if
// something fails it over behind the client's address (a managed
// service's endpoint, a proxy), the Store cannot tell how long that
// takes.
func warnReplicas(ctx context.Context, c *redis.Client, logger *slog.Logger) {
	n, err := connectedReplicas(ctx, c)
	if err != nil || n == 0 {
		return
	}
	logger.Warn("redisstore: the Redis server has replicas; if it fails over behind this client's address (a managed service's endpoint, a proxy), give WithFailoverTime, or the engine's lease may end during a failover and a request in flight run twice",
		slog.String("server", c.Options().Addr), slog.Int("replicas", n))
}
