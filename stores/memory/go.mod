module github.com/idemkit/idem/stores/memory

go 1.26

require (
	github.com/idemkit/idem/conformance v0.1.0
	github.com/idemkit/idem/core v0.1.0
)

replace (
	github.com/idemkit/idem/conformance => ../../conformance
	github.com/idemkit/idem/core => ../../core
)
