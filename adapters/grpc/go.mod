module github.com/idemkit/idem/adapters/grpc

go 1.26.0

require (
	github.com/idemkit/idem/core v0.0.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

replace (
	github.com/idemkit/idem/conformance => ../../conformance
	github.com/idemkit/idem/core => ../../core
	github.com/idemkit/idem/stores/memory => ../../stores/memory
	github.com/idemkit/idem/stores/pgx => ../../stores/pgx
	github.com/idemkit/idem/stores/redis => ../../stores/redis
)
