module github.com/idemkit/idem/client

go 1.26
