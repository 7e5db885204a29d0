package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// maxNamespace is the longest namespace Scope keeps as it is; a longer one
// (a token, say) is replaced by its SHA-256, so scopes stay small enough
// for any store's index.
const maxNamespace = 64

// Scope returns the scope of a record: the client's namespace (principal,
// tenant or API key; empty means global), the HTTP method and the route
// template, joined so that two different triples never give the same scope.
// Each part is prefixed with its length in bytes:
//
//	Scope("acme", "POST", "/orders/{id}") == "4:acme4:POST12:/orders/{id}"
//
// A namespace longer than 64 bytes is replaced by "sha256:" and its hex
// SHA-256, so scopes stay small enough for any store's index.
//
// The middleware and the admin handler both derive a record's scope with
// this function; it is the only definition.
func Scope(namespace, method, route string) string {
	if len(namespace) > maxNamespace {
		sum := sha256.Sum256([]byte(namespace))
		namespace = "sha256:" + hex.EncodeToString(sum[:])
	}
	b := make([]byte, 0, len(namespace)+len(method)+len(route)+12)
	b = appendPart(b, namespace)
	b = appendPart(b, method)
	b = appendPart(b, route)
	return string(b)
}

func appendPart(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}
