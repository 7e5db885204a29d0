package idemclient

import "strings"

// connErrno reports whether err is a refused, reset or hung-up connection;
// Plan 9 reports them as text.
func connErrno(err error) bool {
	s := err.Error()
	return strings.Contains(s, "connection refused") || strings.Contains(s, "connection reset") || strings.Contains(s, "hungup")
}
