package pgxstore

import "github.com/jackc/pgx/v5"

func quoted(table string) string { return pgx.Identifier{table}.Sanitize() }
