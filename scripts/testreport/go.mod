module github.com/idemkit/idem/scripts/testreport

go 1.26
