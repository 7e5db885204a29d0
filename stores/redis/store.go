package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/redis/go-redis/v9"
)

// Errors of this package. Errors from Redis itself are returned wrapped,
// with the failing operation named.
var (
	// ErrBadOption is wrapped by the error New returns for an option
	// value it cannot use. It wraps idem.ErrBadOption.
	ErrBadOption = fmt.Errorf("redisstore: %w", idem.ErrBadOption)
	// ErrClosed is returned by Watch after Close.
	ErrClosed = errors.New("redisstore: store closed")
	// ErrNotReplicated is wrapped by the error of a write that fewer
	// replicas acknowledged than WithReplicas asks for. The write itself
	// happened on the primary: see WithReplicas.
	ErrNotReplicated = errors.New("redisstore: not acknowledged by enough replicas")
	// ErrEvictionPolicy is wrapped by the error New returns when Redis may
	// evict the Store's records: a maxmemory-policy other than noeviction
	// with maxmemory set.
	ErrEvictionPolicy = errors.New("redisstore: Redis may evict idempotency records")
)

// DefaultPrefix is the key prefix used when WithPrefix is not given.
const DefaultPrefix = "idem:"

// maxPrefixLen bounds WithPrefix; a prefix is repeated in every key.
const maxPrefixLen = 256

// Option configures a Store. Options are applied in order by New; a nil
// Option is ignored.
type Option func(*options)

type options struct {
	prefix      string
	replicas    int
	timeout     time.Duration // WithReplicas' WAIT timeout
	logger      *slog.Logger
	failover    time.Duration // WithFailoverTime
	failoverSet bool
	sentinel    *redis.FailoverOptions // WithSentinel
	sentinelSet bool
}

// WithPrefix sets the prefix of every Redis key and of the notification
// channel the Store uses. The default is DefaultPrefix ("idem:"). Stores
// with different prefixes on one Redis never see each other's records.
//
// The prefix must be 1 to 256 bytes and must not contain '{' or '}':
// the Store puts a hash tag right after it, and Redis Cluster hashes only
// the first tag of a key.
func WithPrefix(prefix string) Option {
	return func(o *options) { o.prefix = prefix }
}

// WithReplicas makes a claim, a completion and a lease extension count
// only once n replicas have acknowledged them: each is pipelined with
// WAIT n timeout on the connection that wrote it, at no round trip beyond
// the replication itself. Release, Delete and reads do not wait. A write
// that fewer replicas acknowledge within timeout fails with an error
// wrapping ErrNotReplicated, although it happened on the primary; the
// package documentation (Replication) says what the engine then does.
//
// n must be positive, and timeout at least 1 ms and below the client's
// ReadTimeout (it is also cut to fit each call's deadline). The client
// must be a *redis.Client (one server, or Sentinel) or a
// *redis.ClusterClient, whose WAIT then goes to the key's master.
// Default: off; replication is asynchronous.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(o *options) { o.replicas, o.timeout = n, timeout }
}

// WithLogger sets the logger New warns through about what it finds on
// the servers (see New). Default: slog.Default(); nil means the default.
func WithLogger(logger *slog.Logger) Option {
	return func(o *options) { o.logger = logger }
}

func (o *options) validate(client redis.UniversalClient) error {
	switch {
	case o.prefix == "":
		return fmt.Errorf("%w: WithPrefix: the prefix must not be empty", ErrBadOption)
	case len(o.prefix) > maxPrefixLen:
		return fmt.Errorf("%w: WithPrefix: the prefix is %d bytes, more than %d", ErrBadOption, len(o.prefix), maxPrefixLen)
	case strings.ContainsAny(o.prefix, "{}"):
		return fmt.Errorf("%w: WithPrefix: the prefix %q contains '{' or '}', which would change the hash tag Redis Cluster uses to place every record", ErrBadOption, o.prefix)
	}
	if err := o.validateFailover(); err != nil {
		return err
	}
	if o.replicas == 0 && o.timeout == 0 {
		return nil
	}
	var readTimeout time.Duration
	switch c := client.(type) {
	case *redis.Client:
		readTimeout = c.Options().ReadTimeout
	case *redis.ClusterClient:
		readTimeout = c.Options().ReadTimeout
	default:
		return fmt.Errorf("%w: WithReplicas: the client is a %T; WAIT must go to the connection that wrote, which the Store can only pick on a *redis.Client or a *redis.ClusterClient", ErrBadOption, client)
	}
	switch {
	case o.replicas <= 0:
		return fmt.Errorf("%w: WithReplicas: %d replicas; want at least 1", ErrBadOption, o.replicas)
	case o.timeout < time.Millisecond:
		return fmt.Errorf("%w: WithReplicas: timeout %v; want at least 1ms (WAIT with 0 would block for ever)", ErrBadOption, o.timeout)
	case readTimeout > 0 && o.timeout >= readTimeout:
		return fmt.Errorf("%w: WithReplicas: timeout %v is not below the client's ReadTimeout %v, which would cut the WAIT's reply off", ErrBadOption, o.timeout, readTimeout)
	}
	return nil
}

// Store is a store.Store on Redis. It also implements store.Getter,
// store.Deleter, store.Extender, store.BatchExtender, store.Evicter,
// store.Notifier, store.Clock (Redis's TIME) and store.FailoverBound (see
// New). It does not implement store.ExpiredDeleter: every record carries
// a Redis TTL, so Redis reclaims it by itself.
//
// A Store is safe for concurrent use. It does not own the client: Close
// stops the Store's notification subscription and leaves the client open.
type Store struct {
	client  redis.UniversalClient
	prefix  string
	channel string
	hub     *hub

	// replicas and waitTimeout are WithReplicas' n and timeout; replicas
	// is 0 when the option is off.
	replicas    int
	waitTimeout time.Duration

	// failover is FailoverTime's answer, resolved by New.
	failover time.Duration

	// scriptClaims makes Claim skip the SET NX GET fast path and always run
	// the claim script; tests set it to check the script on its own.
	scriptClaims bool
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.Getter        = (*Store)(nil)
	_ store.Deleter       = (*Store)(nil)
	_ store.Extender      = (*Store)(nil)
	_ store.BatchExtender = (*Store)(nil)
	_ store.Evicter       = (*Store)(nil)
	_ store.Notifier      = (*Store)(nil)
	_ store.Clock         = (*Store)(nil)
	_ store.FailoverBound = (*Store)(nil)
)

// New returns a Store that keeps its records through client: a
// *redis.Client, a *redis.ClusterClient or a Sentinel-backed failover
// client (redis.NewFailoverClient or redis.NewUniversalClient). It returns
// an error wrapping ErrBadOption when an option's value cannot be
// used.
//
// New asks every master (the one server, or each Cluster shard) for its
// maxmemory and maxmemory-policy, waiting at most 2 s, and returns an
// error wrapping ErrEvictionPolicy when Redis may evict the Store's
// records. When Redis cannot be asked (unreachable, or CONFIG refused, as
// managed services may), or an evicting policy is set without maxmemory,
// New logs one warning and returns the Store (a Redis that is down at
// start-up then answers 503 until it is back: a service that must not
// start without it pings the client first, as examples/internal/app does); so it does when a master
// has fewer replicas connected than WithReplicas asks for.
//
// New also finds how long a failover may take (FailoverTime), which the
// engine's lease must outlast, waiting at most 2 s more: on a Cluster
// from every node's cluster-node-timeout; on a Sentinel failover client
// from the Sentinels given with WithSentinel; anywhere from
// WithFailoverTime, which skips the reading. It returns an error
// wrapping ErrFailoverUnknown when the client follows failovers and
// their timing cannot be read: a failover client with neither option, a
// Cluster whose nodes do not all answer CONFIG GET (refused, or not
// reachable: WithFailoverTime lets a service start while its Cluster is
// down), a ClusterClient with ClusterSlots. A single server, or a Ring,
// has no failover (FailoverTime 0); New warns when that server has
// replicas, since something may fail it over behind its address.
//
// A *redis.Ring works too, except that notifications only reach waiters
// for records on the shard that holds the channel; the engine's polling
// covers the others.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: New: the client is nil")
	}
	o := options{prefix: DefaultPrefix}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate(client); err != nil {
		return nil, err
	}
	if !honoursDeadlines(client) {
		return nil, fmt.Errorf("%w: the client ignores context deadlines, so the engine's store timeout could not bound a call to a hung Redis (go-redis then waits its own read and dial timeouts, 3 to 5 seconds); set ContextTimeoutEnabled: true in the client's options", ErrBadOption)
	}
	logger := o.logger
	if logger == nil {
		logger = slog.Default()
	}
	failover, err := failoverTime(client, &o, logger)
	if err != nil {
		return nil, err
	}
	if err := checkServers(client, logger, o.replicas); err != nil {
		return nil, err
	}
	s := &Store{
		client:      client,
		prefix:      o.prefix,
		channel:     o.prefix + "notify",
		replicas:    o.replicas,
		waitTimeout: o.timeout,
		failover:    failover,
	}
	s.hub = newHub(client, s.channel)
	return s, nil
}

// honoursDeadlines reports whether client applies context deadlines to its
// network calls, as far as its concrete type shows.
func honoursDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// Key returns the Redis key that holds the record for (scope, key): the
// prefix, then a hash tag of 32 hex digits derived from scope and key.
// The record is one string at that key (its layout is described in
// codec.go); while a waiter watches an in-progress record, the key + "w"
// marks it (see Watch). The key is exposed for operators and tests.
func (s *Store) Key(scope, key string) string {
	k, _ := recordKey(s.prefix, scope, key)
	return k
}

// Channel returns the Redis Pub/Sub channel on which the Store announces
// the completions, releases, evictions and deletes of records a waiter
// marked (see Watch); the message is the record's hash tag (the 32 hex
// digits between the braces of its key).
func (s *Store) Channel() string { return s.channel }

// Claim implements store.Store in one round trip (two when it takes an
// ended claim over).
//
// The claim is first tried as a single SET key record NX PX ttl GET, which
// is atomic by itself: it stores the new claim when there is no record,
// and otherwise returns the record without changing it. When that record
// still blocks at c.Now (a live lease, or a completed record before its
// expiry) it is the answer. Only when Redis still holds a record that has
// ended by the engine's clock (an abandoned claim, which Redis keeps a
// lease past its lease end for a late Complete; or clock skew) does Claim
// run the claim script, a second round trip, which decides again
// atomically and takes the key over. Both paths store exactly the same
// record. Under WithReplicas each is pipelined with WAIT, and a claim
// taken but not acknowledged returns an error wrapping ErrNotReplicated.
//
// A record in progress that holds c.Token is this claim's own: go-redis
// sends a command again when its connection broke after it was written,
// and the second attempt finds what the first one stored (tokens are
// random per claim, so no other claim holds it). Claim then reports the
// claim acquired rather than blocked by itself (see ownClaim).
func (s *Store) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	rec, err := newClaimRecord(&c)
	if err != nil {
		return store.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	now, err := formatTime(c.Now)
	if err != nil {
		return store.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	k := s.Key(c.Scope, c.Key)
	ttl := ttlMillis(c.Now, keepUntil(c.Now, c.LeaseEnd))
	if s.scriptClaims {
		return s.claimByScript(ctx, k, c.Token, now, rec, ttl)
	}
	v, err := s.setNXGet(ctx, k, rec, time.Duration(ttl)*time.Millisecond)
	if errors.Is(err, redis.Nil) {
		return store.ClaimResult{Acquired: true}, nil
	}
	if err != nil {
		return store.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	existing, err := decodeRecord(v)
	if err != nil {
		return store.ClaimResult{}, fmt.Errorf("redisstore: claim, key %s: %w", k, err)
	}
	if heldBy(v, c.Token) {
		return s.ownClaim(ctx, k, c.Token)
	}
	if !existing.Takeable(c.Now) {
		return store.ClaimResult{Existing: &existing}, nil
	}
	return s.claimByScript(ctx, k, c.Token, now, rec, ttl)
}

// ownClaim answers a claim that found, in progress at k, the record it
// stored itself: an attempt whose reply was lost, sent again by go-redis.
// The claim is acquired. Under WithReplicas the WAIT of the attempt that
// found the record counts nothing (its connection wrote nothing), so the
// record's expiry is set again, unchanged, while it still holds token,
// and that write is pipelined with WAIT: a claim not acknowledged returns
// an error wrapping ErrNotReplicated, as the first attempt would have.
func (s *Store) ownClaim(ctx context.Context, k, token string) (store.ClaimResult, error) {
	if s.replicas == 0 {
		return store.ClaimResult{Acquired: true}, nil
	}
	r, wait, err := s.runSynced(ctx, touchScript, k, token)
	if err != nil {
		return store.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	held, err := s.scriptSynced(r, wait)
	if err != nil {
		return store.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	if !held {
		return store.ClaimResult{}, fmt.Errorf("redisstore: claim: key %s: the claim's own record was deleted while its replication was checked", k)
	}
	return store.ClaimResult{Acquired: true}, nil
}

// setNXGet sends SET k rec NX PX ttl GET, and WAIT under WithReplicas. It
// returns redis.Nil when the claim was taken (and acknowledged), and
// otherwise the record that blocked it.
func (s *Store) setNXGet(ctx context.Context, k, rec string, ttl time.Duration) (string, error) {
	if s.replicas == 0 {
		return s.client.SetArgs(ctx, k, rec, redis.SetArgs{Mode: "NX", TTL: ttl, Get: true}).Result()
	}
	v, acquired, err := s.setSynced(ctx, k, rec, ttl)
	if acquired && err == nil {
		return "", redis.Nil
	}
	return v, err
}

// claimByScript runs the claim script, which decides atomically whatever the
// record's state. now is the claim's now in the record's time encoding;
// token is the claim's, whose own record is no obstacle (see ownClaim).
func (s *Store) claimByScript(ctx context.Context, k, token, now, rec string, ttl int64) (store.ClaimResult, error) {
	var r any
	var err error
	if s.replicas == 0 {
		r, err = claimScript.Run(ctx, s.client, []string{k}, now, rec, ttl).Result()
	} else {
		var wait waitCmd
		r, wait, err = s.runSynced(ctx, claimScript, k, now, rec, ttl)
		if n, ok := r.(int64); ok && n == 1 && err == nil {
			err = s.acked(wait)
		}
	}
	if err != nil {
		return store.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	switch r := r.(type) {
	case int64:
		if r == 1 {
			return store.ClaimResult{Acquired: true}, nil
		}
	case string:
		existing, err := decodeRecord(r)
		if err != nil {
			return store.ClaimResult{}, fmt.Errorf("redisstore: claim, key %s: %w", k, err)
		}
		if heldBy(r, token) {
			return s.ownClaim(ctx, k, token)
		}
		return store.ClaimResult{Existing: &existing}, nil
	}
	return store.ClaimResult{}, fmt.Errorf("redisstore: claim: unexpected reply %T from the claim script", r)
}

// Complete implements store.Store with one script call, which also
// notifies waiters when one marked the record (see Watch). It lands while
// the record is in progress and holds h.Token, also past its lease end
// (Redis keeps the record a lease longer for it). The completed record
// keeps the token, for Evict, and c.Result byte for byte; a Result
// without a Head is refused, as it could not be read back. Under WithReplicas it is pipelined with WAIT; a
// completion not acknowledged returns an error wrapping ErrNotReplicated,
// and so does a later call for a record completed already until its WAIT
// is answered.
func (s *Store) Complete(ctx context.Context, h store.Hold, c store.Completion) error {
	if len(c.Result.Head) == 0 {
		return errors.New("redisstore: complete: the result has no head")
	}
	ts, err := formatTimes(c.Now, c.ExpiresAt)
	if err != nil {
		return fmt.Errorf("redisstore: complete: %w", err)
	}
	k, id := recordKey(s.prefix, h.Scope, h.Key)
	args := []any{h.Token, ts[1], ttlMillis(c.Now, c.ExpiresAt), encodeResultHead(&c.Result), c.Result.Body}
	err = s.held(ctx, "complete", completeScript, k, args)
	if err == nil {
		s.hub.wake(id)
	}
	return err
}

// held runs a script that acts on a held claim (complete, extend), whose
// reply is 1 when it acted and 0 when the claim is lost; under
// WithReplicas it passes "1" as the script's last argument and waits for
// the replicas (see scriptSynced).
func (s *Store) held(ctx context.Context, op string, script *redis.Script, k string, args []any) error {
	if s.replicas == 0 {
		n, err := script.Run(ctx, s.client, []string{k}, args...).Int64()
		if err != nil {
			return fmt.Errorf("redisstore: %s: %w", op, err)
		}
		if n != 1 {
			return store.ErrLeaseLost
		}
		return nil
	}
	r, wait, err := s.runSynced(ctx, script, k, append(args, "1")...)
	if err != nil {
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	ok, err := s.scriptSynced(r, wait)
	if err != nil {
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	if !ok {
		return store.ErrLeaseLost
	}
	return nil
}

// Release implements store.Store with one script call, which also
// notifies waiters when one marked the record (see Watch).
func (s *Store) Release(ctx context.Context, h store.Hold) error {
	k, id := recordKey(s.prefix, h.Scope, h.Key)
	n, err := releaseScript.Run(ctx, s.client, []string{k}, h.Token).Int64()
	if err != nil {
		return fmt.Errorf("redisstore: release: %w", err)
	}
	if n != 1 {
		return store.ErrLeaseLost
	}
	s.hub.wake(id)
	return nil
}

// Extend implements store.Extender with one script call. Like Complete
// it lands while the record is in progress and holds h.Token, also past
// its lease end. Under WithReplicas it is pipelined with WAIT, as Complete
// is.
func (s *Store) Extend(ctx context.Context, h store.Hold, now, leaseEnd time.Time) error {
	ts, err := formatTimes(now, leaseEnd)
	if err != nil {
		return fmt.Errorf("redisstore: extend: %w", err)
	}
	args := []any{h.Token, ts[1], ttlMillis(now, leaseEnd)}
	return s.held(ctx, "extend", extendScript, s.Key(h.Scope, h.Key), args)
}

// ExtendBatch implements store.BatchExtender: the extend script for every
// claim, pipelined in one round trip (on a Cluster, one per node that
// holds a claim). Under WithReplicas each claim is extended as Extend
// does, with its WAIT.
func (s *Store) ExtendBatch(ctx context.Context, now time.Time, refs []store.Extension) []error {
	errs := make([]error, len(refs))
	if s.replicas > 0 {
		for i, r := range refs {
			errs[i] = s.Extend(ctx, r.Hold, now, r.LeaseEnd)
		}
		return errs
	}
	args := make([][]any, len(refs))
	pending := make([]int, 0, len(refs))
	for i, r := range refs {
		ts, err := formatTimes(now, r.LeaseEnd)
		if err != nil {
			errs[i] = fmt.Errorf("redisstore: extend: %w", err)
			continue
		}
		args[i] = []any{r.Token, ts[1], ttlMillis(now, r.LeaseEnd)}
		pending = append(pending, i)
	}
	cmds := make([]*redis.Cmd, len(refs))
	for _, bySource := range [...]bool{false, true} {
		if len(pending) == 0 {
			break
		}
		pipe := s.client.Pipeline()
		for _, i := range pending {
			keys := []string{s.Key(refs[i].Scope, refs[i].Key)}
			if bySource {
				cmds[i] = extendScript.Eval(ctx, pipe, keys, args[i]...)
			} else {
				cmds[i] = extendScript.EvalSha(ctx, pipe, keys, args[i]...)
			}
		}
		_, _ = pipe.Exec(ctx)
		next := pending[:0]
		for _, i := range pending {
			n, err := cmds[i].Int64()
			switch {
			case !bySource && redis.HasErrorPrefix(err, "NOSCRIPT"):
				next = append(next, i)
			case err != nil:
				errs[i] = fmt.Errorf("redisstore: extend: %w", err)
			case n != 1:
				errs[i] = store.ErrLeaseLost
			}
		}
		pending = next
	}
	return errs
}

// Evict implements store.Evicter with one script call, which deletes the
// record, in progress or completed, only while it holds h.Token, and
// notifies waiters. Like Release it does not wait for replicas.
func (s *Store) Evict(ctx context.Context, h store.Hold) error {
	k, id := recordKey(s.prefix, h.Scope, h.Key)
	n, err := evictScript.Run(ctx, s.client, []string{k}, h.Token).Int64()
	if err != nil {
		return fmt.Errorf("redisstore: evict: %w", err)
	}
	if n != 1 {
		return store.ErrLeaseLost
	}
	s.hub.wake(id)
	return nil
}

// Now implements store.Clock: Redis's TIME, read by a script on the key
// prefix + "clock" (never written), so that every engine sharing the
// Store reads the same server: the one server, the Sentinel primary, or
// on a Cluster the master that owns that key's slot (on a Ring, its
// shard). One clock is all the engine needs: records hold the engine's
// times, which the scripts compare with the now the engine passes in,
// never with a server's clock, so the records on every shard are judged
// on that one clock. The other masters' clocks only count the keys' TTLs
// down, from when each write arrives, which their offset does not
// change. After a failover the engine measures the new server's clock
// within a minute.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	r, err := timeScript.Run(ctx, s.client, []string{s.prefix + "clock"}).Int64Slice()
	if err != nil {
		return time.Time{}, fmt.Errorf("redisstore: TIME: %w", err)
	}
	if len(r) != 2 {
		return time.Time{}, fmt.Errorf("redisstore: TIME: %d values in the reply, want 2", len(r))
	}
	return time.Unix(r[0], r[1]*int64(time.Microsecond/time.Nanosecond)), nil
}

// FailoverTime implements store.FailoverBound: how long a failover of the
// deployment may take, as New found it (see New, WithSentinel and
// WithFailoverTime); 0 when nothing fails over.
func (s *Store) FailoverTime() time.Duration { return s.failover }

// Get implements store.Getter with one GET.
func (s *Store) Get(ctx context.Context, r store.Ref, now time.Time) (store.Record, bool, error) {
	k := s.Key(r.Scope, r.Key)
	v, err := s.client.Get(ctx, k).Result()
	if errors.Is(err, redis.Nil) {
		return store.Record{}, false, nil
	}
	if err != nil {
		return store.Record{}, false, fmt.Errorf("redisstore: get: %w", err)
	}
	rec, err := decodeRecord(v)
	if err != nil {
		return store.Record{}, false, fmt.Errorf("redisstore: get, key %s: %w", k, err)
	}
	if !now.Before(rec.ExpiresAt) {
		return store.Record{}, false, nil
	}
	return rec, true, nil
}

// Delete implements store.Deleter with one script call (DEL, and a
// notification when a waiter marked the record).
func (s *Store) Delete(ctx context.Context, r store.Ref) (bool, error) {
	k, id := recordKey(s.prefix, r.Scope, r.Key)
	n, err := deleteScript.Run(ctx, s.client, []string{k}).Int64()
	if err != nil {
		return false, fmt.Errorf("redisstore: delete: %w", err)
	}
	if n == 1 {
		s.hub.wake(id)
	}
	return n == 1, nil
}

// Close stops the Store's notification subscription and wakes every
// pending watch; later Watch calls return ErrClosed. The other methods keep
// working, and the client stays open: it belongs to the caller. Close is
// safe to call more than once.
func (s *Store) Close() error {
	s.hub.close()
	return nil
}
