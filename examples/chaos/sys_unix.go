//go:build unix

package main

import (
	"os"
	"syscall"
)

// pause stops the process (SIGSTOP): it holds its claims and its sockets
// but runs nothing, as a process in a long GC pause or a frozen VM.
func pause(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }

// resume continues a paused process (SIGCONT).
func resume(p *os.Process) error { return p.Signal(syscall.SIGCONT) }

// terminate asks the process to shut down gracefully (SIGTERM).
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
