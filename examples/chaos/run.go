package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// run carries out one chaos run and prints it to w. It returns whether
// every check passed; an error means the run could not be carried out.
func run(ctx context.Context, c *config, w io.Writer) (ok bool, err error) {
	var b [8]byte
	rand.Read(b[:])
	runID := hex.EncodeToString(b[:4])
	if c.seed == 0 {
		c.seed = binary.LittleEndian.Uint64(b[:]) | 1
	}
	rng := newRand(c.seed)
	st, err := newSharedStore(c, runID)
	if err != nil {
		return false, err
	}
	dir, err := os.MkdirTemp("", "idem-chaos-")
	if err != nil {
		return false, err
	}

	// Every instance, with its proxy; torn down by pid whatever happens.
	insts := make([]*instance, c.instances)
	var teardownOnce sync.Once
	var exitNotes []string
	teardown := func() {
		teardownOnce.Do(func() {
			var wg sync.WaitGroup
			var mu sync.Mutex
			for _, in := range insts {
				if in == nil {
					continue
				}
				wg.Go(func() {
					code, err := in.shutdown(15 * time.Second)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						exitNotes = append(exitNotes, err.Error())
					case code != 0:
						exitNotes = append(exitNotes, fmt.Sprintf("%s exited with status %d after SIGTERM (see %s)", in.name, code, in.stderr))
					}
				})
			}
			wg.Wait()
			for _, in := range insts {
				if in != nil {
					in.proxy.close()
				}
			}
		})
	}
	defer func() {
		teardown()
		if !c.keep {
			cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			if cerr := st.cleanup(cctx); cerr != nil {
				fmt.Fprintf(w, "note: cleaning up the store: %v\n", cerr)
			}
			cancel()
		}
		if c.keep || !ok {
			fmt.Fprintf(w, "logs of the instances (stderr, executions): %s\n", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()

	for i := range insts {
		fw := c.framework
		if fw == "mixed" {
			fw = frameworks[i%len(frameworks)]
		}
		var skew time.Duration
		switch i {
		case 0:
			skew = c.clockSkew
		case 1:
			skew = -c.clockSkew
		}
		p, err := newProxy(st.target)
		if err != nil {
			return false, err
		}
		name := fmt.Sprintf("i%d", i)
		in := &instance{
			name: name, framework: fw, skew: skew, bin: c.fixture, proxy: p,
			execLog: filepath.Join(dir, name+".exec"), stderr: filepath.Join(dir, name+".log"),
		}
		in.args = append(st.args(p.addr),
			"-framework", fw, "-lease", c.lease.String(), "-store-timeout", c.storeTimeout.String(),
			"-log-level", c.logLevel, "-exec-log", in.execLog)
		if skew != 0 {
			in.args = append(in.args, "-clock-skew", skew.String())
		}
		insts[i] = in
	}

	var names []string
	for _, in := range insts {
		s := in.name + " " + in.framework
		if in.skew != 0 {
			s += fmt.Sprintf(" (clock %+v)", in.skew)
		}
		names = append(names, s)
	}
	kinds := "none"
	if len(c.kinds) > 0 {
		kinds = strings.Join(c.kinds, ",")
	}
	fmt.Fprintf(w, "chaos: store %s; %d instances: %s\n", st.describe(), c.instances, strings.Join(names, ", "))
	fmt.Fprintf(w, "  lease %v, store timeout %v, attempt timeout %v, handler %v; %d workers, 1 to %d requests per key; faults %s every ~%v; for %v", c.lease, c.storeTimeout, c.attemptTimeout, c.handler, c.workers, c.dups, kinds, c.faultEvery, c.duration)
	if c.requests > 0 {
		fmt.Fprintf(w, " or %d keys", c.requests)
	}
	fmt.Fprintf(w, "; seed %d\n", c.seed)

	// One at a time: concurrent CREATE TABLE IF NOT EXISTS can collide.
	for _, in := range insts {
		if err := in.start("127.0.0.1:0"); err != nil {
			return false, fmt.Errorf("starting %s: %w", in.name, err)
		}
	}

	begin := time.Now()
	j := &injector{cfg: c, insts: insts, rng: rng, begin: begin}
	l, err := newLoad(c, insts, rng, runID)
	if err != nil {
		return false, err
	}
	until := begin.Add(c.duration)
	fctx, stopFaults := context.WithDeadline(ctx, until)
	faultsDone := make(chan struct{})
	go func() { j.run(fctx); close(faultsDone) }()
	l.run(ctx, until)
	sent := time.Since(begin)
	stopFaults()
	<-faultsDone
	teardown() // SIGTERM: requests in flight finish, so every execution is recorded
	stopped := time.Since(begin)

	fmt.Fprintf(w, "faults: %d", len(j.faults))
	counts := map[string]int{}
	for _, f := range j.faults {
		counts[f.kind]++
	}
	for _, k := range faultKinds {
		if counts[k] > 0 {
			fmt.Fprintf(w, ", %s %d", k, counts[k])
		}
	}
	fmt.Fprintln(w)
	for _, f := range j.faults {
		fmt.Fprintln(w, "  "+j.describe(f))
	}

	r := &report{cfg: c, j: j, insts: insts, answers: l.answers, attempt: l.attempts, exits: exitNotes, interrupted: ctx.Err() != nil}
	for _, in := range insts {
		xs, bad, err := readExecLog(in.execLog)
		if err != nil {
			return false, err
		}
		r.runs = append(r.runs, xs...)
		r.badLog = append(r.badLog, bad...)
	}
	if c.exactlyOnce {
		rctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		r.rows, err = st.committed(rctx)
		cancel()
		if err != nil {
			return false, fmt.Errorf("reading the committed executions: %w", err)
		}
	}
	v := r.check(w)
	for _, f := range j.faults {
		if f.err != nil {
			v.fail("fault %s on %s failed: %v", f.kind, f.inst.name, f.err)
		}
	}
	fmt.Fprintf(w, "time: requests for %v, all done and stopped at %v\n", sent.Round(10*time.Millisecond), stopped.Round(10*time.Millisecond))
	if len(v.failures) == 0 {
		fmt.Fprintln(w, "PASS")
		return true, nil
	}
	for _, f := range v.failures {
		fmt.Fprintln(w, "FAIL: "+f)
	}
	for _, in := range insts {
		tail(w, in.stderr, 5)
	}
	return false, nil
}

// tail prints the last n lines of an instance's stderr.
func tail(w io.Writer, path string, n int) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	fmt.Fprintf(w, "last %d of %d lines of %s:\n", min(n, len(lines)), len(lines), filepath.Base(path))
	for _, l := range lines[max(0, len(lines)-n):] {
		fmt.Fprintln(w, "  "+l)
	}
}
