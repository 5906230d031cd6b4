-- Circuit breakers decide on a window of fleet-wide counts, not on a run of
-- consecutive faults (internal/circuit): a relay's breaker opens only when,
-- within the window that began at window_start, there were enough provider
-- faults AND the successes reported by every worker in that window are
-- below a floor of the total, so a relay that still accepts mail for some
-- worker is never opened by another worker's faults. Throttle replies are
-- not counted at all: they go to the send control.
ALTER TABLE postline_circuits
	ADD COLUMN successes    integer NOT NULL DEFAULT 0 CHECK (successes >= 0), -- accepted sends reported in the window
	ADD COLUMN window_start timestamptz;                                       -- first fault of the window; NULL = none

COMMENT ON COLUMN postline_circuits.failures IS
	'provider faults counted in the window that began at window_start (kept when the circuit opens, grown by failed probes)';
COMMENT ON COLUMN postline_circuits.successes IS
	'accepted sends reported by every worker in the window (batched: at most one write per worker per flush interval)';
COMMENT ON COLUMN postline_circuits.window_start IS
	'time of the fault that began the current counting window; NULL while no fault is being counted';
