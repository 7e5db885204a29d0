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

	"github.com/redis/go-redis/v9"
)

// checkTimeout bounds New's questions to the servers.
const checkTimeout = 2 * time.Second

// serverReport gathers what each master told New.
type serverReport struct {
	mu      sync.Mutex
	evict   []string // masters that may evict records now
	latent  []string // masters with an evicting policy but no maxmemory
	unknown []string // masters that could not be asked, with why
	short   []string // masters with fewer replicas than WithReplicas asks for
}

func (r *serverReport) add(list *[]string, s string) {
	r.mu.Lock()
	*list = append(*list, s)
	r.mu.Unlock()
}

// checkServers asks every master behind client for its maxmemory and
// maxmemory-policy and, when replicas is positive, for its connected
// replicas. It returns an error wrapping ErrEvictionPolicy when one may
// evict the Store's records: a policy other than noeviction with
// maxmemory set. Every record has a TTL, so the volatile-* policies
// reach them as surely as the allkeys-* ones, and volatile-ttl takes the
// claims of requests in flight first. It logs one warning for each of: a
// master that could not be asked, one with an evicting policy but no
// maxmemory (nothing is evicted until maxmemory is set), and one with
// fewer connected replicas than WithReplicas asks for.
func checkServers(client redis.UniversalClient, logger *slog.Logger, replicas int) error {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	var r serverReport
	check := func(ctx context.Context, c *redis.Client) error {
		r.ask(ctx, c, c.Options().Addr, replicas)
		return nil
	}
	var err error
	switch c := client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, check)
	case *redis.Ring:
		err = c.ForEachShard(ctx, check)
	case *redis.Client:
		err = check(ctx, c)
	default:
		r.ask(ctx, client, fmt.Sprintf("%T", client), replicas)
	}
	if err != nil {
		r.add(&r.unknown, err.Error())
	}
	if len(r.evict) > 0 {
		return fmt.Errorf("%w: %s. An evicted record lets its request run again, and an evicted claim lets a duplicate run beside it; every record has a TTL, so volatile-* policies reach them as allkeys-* ones do. Set maxmemory-policy noeviction: a full Redis then refuses writes, and the engine answers 503", ErrEvictionPolicy, strings.Join(r.evict, "; "))
	}
	if len(r.unknown) > 0 {
		logger.Warn("redisstore: could not check that Redis will not evict idempotency records; make sure maxmemory-policy is noeviction",
			slog.String("why", strings.Join(r.unknown, "; ")))
	}
	if len(r.latent) > 0 {
		logger.Warn("redisstore: Redis has an evicting maxmemory-policy without maxmemory: nothing is evicted now, but idempotency records would be once maxmemory is set; use noeviction",
			slog.String("servers", strings.Join(r.latent, "; ")))
	}
	if len(r.short) > 0 {
		logger.Warn(fmt.Sprintf("redisstore: WithReplicas(%d, ...): Redis has fewer replicas connected; until it has them, every new request gets 503", replicas),
			slog.String("servers", strings.Join(r.short, "; ")))
	}
	return nil
}

// ask asks one server, named addr in the report.
func (r *serverReport) ask(ctx context.Context, c redis.Cmdable, addr string, replicas int) {
	policy, maxmemory, err := evictionConfig(ctx, c)
	switch {
	case err != nil:
		r.add(&r.unknown, fmt.Sprintf("%s: %v", addr, err))
	case policy == "noeviction":
	case maxmemory > 0:
		r.add(&r.evict, fmt.Sprintf("Redis at %s has maxmemory-policy %s with maxmemory %d", addr, policy, maxmemory))
	default:
		r.add(&r.latent, fmt.Sprintf("%s: maxmemory-policy %s", addr, policy))
	}
	if replicas > 0 {
		if n, err := connectedReplicas(ctx, c); err == nil && n < replicas {
			r.add(&r.short, fmt.Sprintf("%s: %d connected", addr, n))
		}
	}
}

// connectedReplicas reads connected_slaves from INFO replication.
func connectedReplicas(ctx context.Context, c redis.Cmdable) (int, error) {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO replication has no connected_slaves")
}

// evictionConfig reads maxmemory-policy and maxmemory with one CONFIG GET.
func evictionConfig(ctx context.Context, c redis.Cmdable) (policy string, maxmemory int64, err error) {
	m, err := c.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		return "", 0, fmt.Errorf("CONFIG GET maxmemory*: %w", err)
	}
	policy, ok := m["maxmemory-policy"]
	mm, ok2 := m["maxmemory"]
	if !ok || !ok2 {
		return "", 0, errors.New("CONFIG GET maxmemory* returned no maxmemory or maxmemory-policy")
	}
	if maxmemory, err = strconv.ParseInt(mm, 10, 64); err != nil {
		return "", 0, fmt.Errorf("maxmemory %q: %w", mm, err)
	}
	return policy, maxmemory, nil
}
