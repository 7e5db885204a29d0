//go:build !unix

package main

import (
	"errors"
	"os"
)

var errNoSignals = errors.New("stopping a process needs a unix system")

func pause(*os.Process) error       { return errNoSignals }
func resume(*os.Process) error      { return errNoSignals }
func terminate(p *os.Process) error { return p.Kill() }
