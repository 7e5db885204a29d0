package main

import (
	"os"
	"strings"
	"time"
)

// Example reads a `go test -json` stream and prints a package's line as
// it ends, then the skipped tests with their reasons.
func Example() {
	stream := `{"Action":"start","Package":"github.com/idemkit/idem/stores/redis"}
{"Action":"output","Package":"github.com/idemkit/idem/stores/redis","Test":"TestCluster","Output":"    cluster_test.go:20: redis-server not installed\n"}
{"Action":"skip","Package":"github.com/idemkit/idem/stores/redis","Test":"TestCluster"}
{"Action":"pass","Package":"github.com/idemkit/idem/stores/redis","Elapsed":2.5}
`
	r := newReport(os.Stdout, time.Now)
	r.read(strings.NewReader(stream))
	r.summary()
	// Output:
	//   ok   stores/redis                                        2.5s
	//
	// 1 skipped:
	//   stores/redis TestCluster: cluster_test.go:20: redis-server not installed
}
