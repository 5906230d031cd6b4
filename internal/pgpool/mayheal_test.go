package pgpool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestMayHeal(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("claim: %w", &pgconn.PgError{Code: code}) }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"cancelled", context.Canceled, false},
		{"network", io.ErrUnexpectedEOF, true},
		{"connection failure", pg("08006"), true},
		{"too many connections", pg("53300"), true},
		{"admin shutdown", pg("57P01"), true},
		{"serialization failure", pg("40001"), true},
		{"deadlock", pg("40P01"), true},
		{"lock not available", pg("55P03"), true},
		{"bad password", pg("28P01"), false},
		{"numeric out of range", pg("22003"), false},
		{"undefined table", pg("42P01"), false},
		{"unique violation", pg("23505"), false},
		{"other", errors.New("mystery"), true},
	}
	for _, tt := range tests {
		if got := MayHeal(tt.err); got != tt.want {
			t.Errorf("%s: MayHeal(%v) = %t, want %t", tt.name, tt.err, got, tt.want)
		}
	}
}
