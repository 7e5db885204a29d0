module github.com/idemkit/idem/stores/mysql

go 1.26

require (
	github.com/go-sql-driver/mysql v1.10.1
	github.com/idemkit/idem/conformance v0.1.0
	github.com/idemkit/idem/core v0.1.0
	github.com/idemkit/idem/stores/sqlbase v0.1.0
)

require filippo.io/edwards25519 v1.2.0 // indirect

replace (
	github.com/idemkit/idem/conformance => ../../conformance
	github.com/idemkit/idem/core => ../../core
	github.com/idemkit/idem/stores/sqlbase => ../sqlbase
)
