package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file holds WithReplicas' machinery: each write the engine counts
// on is pipelined with WAIT on the connection that wrote it, since WAIT
// waits for the writes of its own connection only.

// pipeline returns a pipeline whose commands go, on one connection, to
// the master that owns key. A ClusterClient would send WAIT, which names
// no key, to another node (or refuse to pipeline it), so on Cluster the
// pipeline is the key's master's own client.
func (s *Store) pipeline(ctx context.Context, key string) (redis.Pipeliner, error) {
	if c, ok := s.client.(*redis.ClusterClient); ok {
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return node.Pipeline(), nil
	}
	return s.client.Pipeline(), nil
}

// waitCmd is a WAIT queued in a pipeline, with the timeout it was given.
type waitCmd struct {
	*redis.IntCmd
	timeout time.Duration
}

// waitMargin is the time a WAIT cut to fit a deadline leaves for its
// reply: Redis checks a blocked WAIT's timeout on its hz tick (every
// 100 ms by default), so a WAIT can overrun its timeout by that much.
const waitMargin = 150 * time.Millisecond

// queueWait adds WAIT to pipe, its timeout cut to fit ctx's deadline
// (less waitMargin or a tenth of the time left, at most half of it), so
// that a short WAIT is reported as ErrNotReplicated rather than as the
// call's timeout.
func (s *Store) queueWait(ctx context.Context, pipe redis.Pipeliner) waitCmd {
	d := s.waitTimeout
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		d = min(d, max(left-max(left/10, waitMargin), left/2))
	}
	d = max(d.Truncate(time.Millisecond), time.Millisecond) // WAIT 0 would block for ever
	cmd := redis.NewIntCmd(ctx, "wait", s.replicas, d.Milliseconds())
	_ = pipe.Process(ctx, cmd) // queued: the reply comes with Exec
	return waitCmd{cmd, d}
}

// failed is told of a pipeline that failed. On Cluster, a redirection or
// a broken connection means the slot map is stale: it is reloaded, in the
// background, for the next call.
func (s *Store) failed(err error) {
	c, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return
	}
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	var rerr redis.Error
	if moved || ask || !errors.As(err, &rerr) {
		c.ReloadState(context.Background())
	}
}

// acked checks WAIT's answer for a write that took place.
func (s *Store) acked(wait waitCmd) error {
	n, err := wait.Result()
	if err != nil {
		return fmt.Errorf("WAIT: %w", err)
	}
	if n < int64(s.replicas) {
		return fmt.Errorf("%w: %d of %d replicas acknowledged within %v; the write stays on the primary",
			ErrNotReplicated, n, s.replicas, wait.timeout)
	}
	return nil
}

// setSynced is the claim's SET key rec NX PX ttl GET, pipelined with
// WAIT. It returns the existing record, or "" and acquired true; a claim
// that landed but was not acknowledged is an error wrapping
// ErrNotReplicated. A claim that found a record wrote nothing, so its
// WAIT's answer is ignored.
func (s *Store) setSynced(ctx context.Context, k, rec string, ttl time.Duration) (v string, acquired bool, err error) {
	pipe, err := s.pipeline(ctx, k)
	if err != nil {
		return "", false, err
	}
	set := pipe.SetArgs(ctx, k, rec, redis.SetArgs{Mode: "NX", TTL: ttl, Get: true})
	wait := s.queueWait(ctx, pipe)
	_, _ = pipe.Exec(ctx) // each command's own error is read below
	v, err = set.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", true, s.acked(wait)
	case err != nil:
		s.failed(err)
		return "", false, err
	}
	return v, false, nil
}

// runSynced runs script on key by its SHA-1 (by its source after
// NOSCRIPT), pipelined with WAIT, and returns the script's reply and the
// WAIT.
func (s *Store) runSynced(ctx context.Context, script *redis.Script, key string, args ...any) (any, waitCmd, error) {
	keys := []string{key}
	for _, bySource := range [...]bool{false, true} {
		pipe, err := s.pipeline(ctx, key)
		if err != nil {
			return nil, waitCmd{}, err
		}
		var cmd *redis.Cmd
		if bySource {
			cmd = script.Eval(ctx, pipe, keys, args...)
		} else {
			cmd = script.EvalSha(ctx, pipe, keys, args...)
		}
		wait := s.queueWait(ctx, pipe)
		_, _ = pipe.Exec(ctx)
		err = cmd.Err()
		if !bySource && redis.HasErrorPrefix(err, "NOSCRIPT") {
			continue
		}
		if err != nil {
			s.failed(err)
			return nil, waitCmd{}, err
		}
		return cmd.Val(), wait, nil
	}
	panic("unreachable")
}

// scriptSynced interprets a held-claim script's reply under WithReplicas:
// 1, the write took place and must be acknowledged; 2, the record is
// completed already, and its expiry was set again (an unchanged write)
// so that WAIT covers it: once acknowledged the claim is reported lost,
// and the engine's background completion looks the record up to learn
// whether it was its own; 0, the claim is lost.
func (s *Store) scriptSynced(r any, wait waitCmd) (held bool, err error) {
	n, _ := r.(int64)
	switch n {
	case 1:
		return true, s.acked(wait)
	case 2:
		return false, s.acked(wait)
	}
	return false, nil
}
