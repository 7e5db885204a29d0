//go:build race

package e2e

// The tests run with -race: the example programs build with it too, from
// the dependencies the tests' own build compiled, instead of compiling
// them all again without it (minutes on a fresh machine).
func init() { buildFlags = append(buildFlags, "-race") }
