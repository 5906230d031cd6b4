//go:build !race

package e2e

// raceEnabled is true when the tests run with -race: the worker binary is
// then built with -race too, and a data race it reports fails the test.
const raceEnabled = false
