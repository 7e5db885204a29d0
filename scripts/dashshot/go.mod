module github.com/idemkit/idem/scripts/dashshot

go 1.26.0

require golang.org/x/image v0.47.0
