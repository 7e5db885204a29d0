package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// The kinds of fault.
const (
	faultKill      = "kill"      // kill -9, restart after a moment
	faultStop      = "stop"      // SIGSTOP past the lease and the attempt timeout, then SIGCONT
	faultStall     = "stall"     // the instance's store proxy hangs, well within the lease
	faultCut       = "cut"       // the instance's store connections are cut, and refused for a moment
	faultPartition = "partition" // the instance's store proxy hangs past the lease
)

var faultKinds = []string{faultKill, faultStop, faultStall, faultCut, faultPartition}

// holding reports whether a fault of this kind can make another instance
// take over a key the instance holds: it dies, or it cannot reach the
// store for longer than the lease. Only these excuse a key run twice, and
// only in plain mode. At most all instances but one are under such a
// fault at once.
func holding(kind string) bool {
	return kind == faultKill || kind == faultStop || kind == faultPartition
}

// fault is one fault injected.
type fault struct {
	kind  string
	inst  *instance
	pid   int       // the process it hit
	start time.Time // when it began: the kill, the stop, the proxy change
	end   time.Time // when it was undone: restart, SIGCONT, proxy up
	note  string
	err   error
}

// injector injects faults at random until its context ends.
type injector struct {
	cfg   *config
	insts []*instance
	rng   *lockedRand
	begin time.Time

	mu     sync.Mutex
	faults []*fault
	wg     sync.WaitGroup
}

// run injects one fault every cfg.faultEvery on average (uniformly
// between half and one and a half times it) until ctx ends, then waits
// for the faults under way to be undone.
func (j *injector) run(ctx context.Context) {
	defer j.wg.Wait()
	if len(j.cfg.kinds) == 0 {
		return
	}
	for {
		wait := time.Duration(float64(j.cfg.faultEvery) * (0.5 + j.rng.Float64()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		kind := j.cfg.kinds[j.rng.IntN(len(j.cfg.kinds))]
		in := j.pick(kind)
		if in == nil {
			continue // every instance is busy, or it would leave none healthy
		}
		f := &fault{kind: kind, inst: in}
		j.mu.Lock()
		j.faults = append(j.faults, f)
		j.mu.Unlock()
		j.wg.Go(func() {
			defer func() {
				in.mu.Lock()
				in.busy = ""
				in.mu.Unlock()
			}()
			j.inject(f)
			if f.kind == faultStall || f.kind == faultCut {
				// Let the heartbeat (every third of the lease, checked
				// twice as often) reach the store before the next store
				// fault on this instance: back-to-back short faults
				// would add up to a partition nobody excuses.
				time.Sleep(j.cfg.lease / 2)
			}
		})
	}
}

// pick returns an idle instance for a fault of kind and marks it busy,
// or nil. A fault that takes an instance away leaves at least one other
// untouched.
func (j *injector) pick(kind string) *instance {
	var idle []*instance
	away := 0
	for _, in := range j.insts {
		in.mu.Lock()
		switch {
		case in.busy != "":
			if holding(in.busy) {
				away++
			}
		case in.state == stateDead: // it exited by itself
			away++
		default:
			idle = append(idle, in)
		}
		in.mu.Unlock()
	}
	if len(idle) == 0 || (holding(kind) && away+1 >= len(j.insts)) {
		return nil
	}
	in := idle[j.rng.IntN(len(idle))]
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.busy != "" || in.state == stateDead {
		return nil
	}
	in.busy = kind
	return in
}

// between returns a random duration in [lo, hi].
func (j *injector) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(j.rng.Float64()*float64(hi-lo))
}

// inject carries f out and undoes it. The durations come from the lease
// L and the attempt timeout A: a stop or a partition lasts from 1.25 to 2
// times the longer of the two, so the instance's claims lapse and a
// client waiting on it has given up before it answers; a stall lasts from
// L/10 to L/4, which the heartbeat (every L/3) rides out; a cut refuses
// new connections for up to L/10.
func (j *injector) inject(f *fault) {
	c := j.cfg
	long := max(c.lease, c.attemptTimeout)
	in := f.inst
	switch f.kind {
	case faultKill:
		f.start = time.Now()
		f.pid, f.err = in.kill()
		if f.err != nil {
			return
		}
		time.Sleep(j.between(c.lease/10, c.lease/2))
		f.err = in.restart()
		f.end = time.Now()
		if f.err == nil {
			_, pid, _ := in.current()
			f.note = fmt.Sprintf("restarted at %s as pid %d", j.at(f.end), pid)
		}
	case faultStop:
		d := j.between(long*5/4, 2*long)
		f.start = time.Now()
		if f.pid, f.err = in.setStopped(true); f.err != nil {
			return
		}
		time.Sleep(d)
		f.end = time.Now()
		_, f.err = in.setStopped(false)
		f.note = fmt.Sprintf("for %v", f.end.Sub(f.start).Round(time.Millisecond))
	case faultStall, faultPartition, faultCut:
		mode, d := proxyBlackhole, j.between(c.lease/10, c.lease/4)
		switch f.kind {
		case faultPartition:
			d = j.between(long*5/4, 2*long)
		case faultCut:
			mode, d = proxyDown, j.between(0, c.lease/10)
		}
		_, f.pid, _ = in.current()
		f.start = time.Now()
		if f.err = in.proxy.set(mode); f.err != nil {
			return
		}
		time.Sleep(d)
		f.end = time.Now()
		f.err = in.proxy.set(proxyUp)
		f.note = fmt.Sprintf("for %v", f.end.Sub(f.start).Round(time.Millisecond))
	}
}

// at formats t relative to the run's start.
func (j *injector) at(t time.Time) string {
	return fmt.Sprintf("+%.2fs", t.Sub(j.begin).Seconds())
}

// describe is one line of the fault log.
func (j *injector) describe(f *fault) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%8s  %-9s %s", j.at(f.start), f.kind, f.inst.name)
	if f.pid != 0 {
		fmt.Fprintf(&b, " (pid %d)", f.pid)
	}
	if f.note != "" {
		b.WriteString(" " + f.note)
	}
	if f.err != nil {
		fmt.Fprintf(&b, " FAILED: %v", f.err)
	}
	return b.String()
}

// lockedRand is a math/rand/v2 source safe for concurrent use.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newRand(seed uint64) *lockedRand {
	return &lockedRand{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (l *lockedRand) IntN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(n)
}

func (l *lockedRand) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

func (l *lockedRand) Perm(n int) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Perm(n)
}
