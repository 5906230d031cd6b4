// Package adaptive owns the retry and pacing policy of the delivery worker:
// how long a failed job waits (Policy and its three implementations Uniform,
// Reference and Adaptive), the rolling success rate (Window), retry budgets
// per priority (Budgets), send concurrency per relay (AIMD), a learned
// send rate per relay (Pacer), a relay rate shared by the fleet
// (FleetShare, RateLimiter) and a guard on Go runtime pressure
// (PressureGuard).
//
// The package is pure: callers pass numbers and the current time in and get
// decisions out. It does no I/O, starts no goroutines and reads no clock of
// its own, so the same code runs in the worker and on the simulator's
// virtual clock (bench/adaptive). Measuring the inputs (consumer lag,
// runtime/metrics), exporting metrics and routing a job to a delay tier stay
// with the caller (internal/delivery).
//
// Types with state (Window, Budgets, AIMD, Pacer, RateLimiter,
// PressureGuard) are safe for concurrent use. The policies are safe for concurrent use when
// their Float64Func is (the default, math/rand/v2's global source, is).
package adaptive
