module github.com/idemkit/idem/adapters/chi

go 1.26

require (
	github.com/go-chi/chi/v5 v5.5.0
	github.com/idemkit/idem/conformance v0.1.0
	github.com/idemkit/idem/core v0.1.0
	github.com/idemkit/idem/stores/memory v0.1.0
)

replace (
	github.com/idemkit/idem/conformance => ../../conformance
	github.com/idemkit/idem/core => ../../core
	github.com/idemkit/idem/stores/memory => ../../stores/memory
)
