// Package schema owns Postline's PostgreSQL schema: the embedded SQL
// migrations of every table (postline_messages and those that follow) and
// Migrate, which applies them under an advisory lock. The packages that use
// the tables (idempotency, ...) own the queries, not the DDL.
package schema
