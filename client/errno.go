//go:build !plan9 && !windows

package idemclient

import (
	"errors"
	"syscall"
)

// connErrno reports whether err is a refused, reset or aborted connection,
// or a write to one the server closed.
func connErrno(err error) bool {
	errno, ok := errors.AsType[syscall.Errno](err)
	if !ok {
		return false
	}
	switch errno {
	case syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE:
		return true
	}
	return false
}
