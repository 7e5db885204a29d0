module github.com/idemkit/idem/examples

go 1.26

require (
	github.com/idemkit/idem/core v0.0.0
	github.com/idemkit/idem/stores/memory v0.0.0
	github.com/idemkit/idem/adapters/gin v0.0.0
	github.com/idemkit/idem/adapters/echo v0.0.0
	github.com/idemkit/idem/adapters/chi v0.0.0
	github.com/idemkit/idem/stores/redis v0.0.0
	github.com/idemkit/idem/stores/pgx v0.0.0
	github.com/idemkit/idem/conformance v0.0.0
)

replace (
	github.com/idemkit/idem/core => ../core
	github.com/idemkit/idem/stores/memory => ../stores/memory
	github.com/idemkit/idem/adapters/gin => ../adapters/gin
	github.com/idemkit/idem/adapters/echo => ../adapters/echo
	github.com/idemkit/idem/adapters/chi => ../adapters/chi
	github.com/idemkit/idem/stores/redis => ../stores/redis
	github.com/idemkit/idem/stores/pgx => ../stores/pgx
	github.com/idemkit/idem/conformance => ../conformance
)
