package main

import (
	"testing"
)

func TestLoadAverage(t *testing.T) {
	if got := loadAverage("1.52 1.20 0.90 3/412 12345\n"); got != 1.52 {
		t.Fatalf("loadAverage = %v, want 1.52", got)
	}
	if got := loadAverage(""); got != 0 {
		t.Fatalf("loadAverage of nothing = %v, want 0", got)
	}
}
