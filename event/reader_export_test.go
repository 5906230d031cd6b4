package event

// NewTestReader returns a Reader of f, for tests that serve records without
// Kafka.
func NewTestReader(f fetcher, cfg ReaderConfig) (*Reader, error) { return newReader(f, cfg) }
