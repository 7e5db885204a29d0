package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// procState is what an instance is doing.
type procState int

const (
	stateRunning procState = iota
	stateStopped           // SIGSTOP: still accepts connections, answers nothing
	stateDead              // killed, not restarted yet
)

// instance is one slot of the fixture: a process, restarted after each
// kill on the same address when it can, behind its own store proxy.
type instance struct {
	name      string
	framework string
	skew      time.Duration
	bin       string
	args      []string // the fixture's flags, without -addr
	proxy     *proxy
	execLog   string // the -exec-log file of every incarnation
	stderr    string // every incarnation's stderr, appended

	mu       sync.Mutex
	proc     *os.Process
	pid      int
	addr     string
	state    procState
	busy     string        // the kind of the fault under way on it, or ""
	expected bool          // the current process's exit is ours
	exited   chan struct{} // closed when the current process has exited
	pids     []int
	exits    []string // exits nobody asked for
	lastCode int      // the exit status of the last process that exited
	startErr error
}

// start runs a new incarnation on addr ("127.0.0.1:0" for any port) and
// waits for its "listening on" line.
func (in *instance) start(addr string) error {
	errf, err := os.OpenFile(in.stderr, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer errf.Close() // the child has its own copy
	cmd := exec.Command(in.bin, append(append([]string(nil), in.args...), "-addr", addr)...)
	cmd.Stderr = errf
	cmd.SysProcAttr = childAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		for sc.Scan() { // drain: nothing else is expected on stdout
		}
	}()
	exited := make(chan struct{})
	in.mu.Lock()
	in.proc, in.pid, in.expected, in.exited = cmd.Process, cmd.Process.Pid, false, exited
	in.pids = append(in.pids, cmd.Process.Pid)
	in.mu.Unlock()
	go func() {
		err := cmd.Wait()
		in.mu.Lock()
		in.lastCode = cmd.ProcessState.ExitCode()
		if !in.expected {
			in.exits = append(in.exits, fmt.Sprintf("pid %d exited by itself at %s: %v", cmd.Process.Pid, time.Now().Format("15:04:05.000"), err))
		}
		if in.proc == cmd.Process {
			in.state = stateDead
		}
		in.mu.Unlock()
		close(exited)
	}()
	var line string
	var ok bool
	select {
	case line, ok = <-lines:
	case <-time.After(30 * time.Second):
	}
	u, found := strings.CutPrefix(line, "listening on http://")
	if !ok || !found {
		in.mu.Lock()
		in.expected = true
		in.mu.Unlock()
		cmd.Process.Kill()
		<-exited
		if !ok {
			return fmt.Errorf("%s did not start listening on %s (see %s)", in.name, addr, in.stderr)
		}
		return fmt.Errorf("%s: first line %q, want \"listening on http://...\"", in.name, line)
	}
	in.mu.Lock()
	in.addr, in.state = u, stateRunning
	in.mu.Unlock()
	return nil
}

// restart starts a new incarnation on the old address, or on any free
// port when that one is taken.
func (in *instance) restart() error {
	in.mu.Lock()
	addr := in.addr
	in.mu.Unlock()
	err := in.start(addr)
	if err != nil {
		err2 := in.start("127.0.0.1:0")
		if err2 == nil {
			return nil
		}
		err = errors.Join(err, err2)
	}
	in.mu.Lock()
	in.startErr = err
	in.mu.Unlock()
	return err
}

// target returns the address to send a request to, or false while the
// instance is dead. A stopped instance is a target: its sockets accept,
// and the client finds out by timing out, as behind a load balancer.
func (in *instance) target() (string, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.addr, in.state != stateDead
}

// current returns the running process, its pid and state.
func (in *instance) current() (*os.Process, int, procState) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.proc, in.pid, in.state
}

// kill sends SIGKILL and waits for the exit.
func (in *instance) kill() (pid int, err error) {
	in.mu.Lock()
	p, pid, exited := in.proc, in.pid, in.exited
	if in.state == stateDead || p == nil {
		in.mu.Unlock()
		return pid, fmt.Errorf("%s is not running", in.name)
	}
	in.expected = true
	in.mu.Unlock()
	err = p.Kill()
	<-exited
	return pid, err
}

// setStopped pauses or resumes the process.
func (in *instance) setStopped(stop bool) (pid int, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.state == stateDead || in.proc == nil {
		return in.pid, fmt.Errorf("%s is not running", in.name)
	}
	if stop {
		err = pause(in.proc)
		if err == nil {
			in.state = stateStopped
		}
	} else {
		err = resume(in.proc)
		if err == nil {
			in.state = stateRunning
		}
	}
	return in.pid, err
}

// shutdown ends the current process: SIGTERM (after SIGCONT, should it be
// stopped), which lets requests in flight finish, then SIGKILL after
// grace. It returns the exit status, or -1 when it had to be killed.
func (in *instance) shutdown(grace time.Duration) (code int, err error) {
	in.mu.Lock()
	p, exited, state := in.proc, in.exited, in.state
	if p == nil || state == stateDead {
		in.mu.Unlock()
		return 0, nil
	}
	in.expected = true
	if state == stateStopped {
		resume(p)
		in.state = stateRunning
	}
	in.mu.Unlock()
	if err := terminate(p); err != nil {
		p.Kill()
	}
	select {
	case <-exited:
	case <-time.After(grace):
		p.Kill()
		<-exited
		return -1, fmt.Errorf("%s (pid %d) did not exit %v after SIGTERM; killed", in.name, p.Pid, grace)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.lastCode, nil
}
