//go:build !race

package dkim

const raceEnabled = false
