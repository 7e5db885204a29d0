module github.com/idemkit/idem/adapters/echov5

go 1.26

require (
	github.com/idemkit/idem/conformance v0.1.0
	github.com/idemkit/idem/core v0.1.0
	github.com/idemkit/idem/stores/memory v0.1.0
	github.com/labstack/echo/v5 v5.4.4
)

require golang.org/x/time v0.15.0 // indirect

replace (
	github.com/idemkit/idem/conformance => ../../conformance
	github.com/idemkit/idem/core => ../../core
	github.com/idemkit/idem/stores/memory => ../../stores/memory
)
