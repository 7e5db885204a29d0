package idemclient

import (
	"errors"
	"syscall"
)

// wsaeconnrefused is Winsock's "connection refused", which package syscall
// does not name.
const wsaeconnrefused syscall.Errno = 10061

// connErrno reports whether err is a refused, reset or aborted connection,
// or a write to one the server closed.
func connErrno(err error) bool {
	errno, ok := errors.AsType[syscall.Errno](err)
	if !ok {
		return false
	}
	switch errno {
	case wsaeconnrefused, syscall.WSAECONNRESET, syscall.WSAECONNABORTED,
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE:
		return true
	}
	return false
}
