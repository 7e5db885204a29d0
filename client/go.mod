module github.com/idemkit/idem/client

go 1.26

require github.com/idemkit/idem/core v0.1.0

replace github.com/idemkit/idem/core => ../core
