package main

import "syscall"

// childAttr makes the kernel kill an instance when this program dies,
// however it dies, so no fixture outlives a run.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
