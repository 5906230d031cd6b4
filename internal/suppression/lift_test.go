package suppression

import "testing"

// TestLiftFromMessages removes only the entries a mail's own relay refusal
// added: the same address suppressed by a complaint, or by another mail,
// stays.
func TestLiftFromMessages(t *testing.T) {
	s, _, _, _ := newTestStore(t)
	mustAdd(t, s,
		Entry{Address: "a@example.com", Stream: StreamAll, Reason: ReasonHardBounce, Source: SourceRelayRefusal, MessageID: "m1@x"},
		Entry{Address: "b@example.com", Stream: StreamAll, Reason: ReasonHardBounce, Source: SourceRelayRefusal, MessageID: "m2@x"},
		Entry{Address: "c@example.com", Stream: StreamTransactional, Reason: ReasonComplaint, Source: "arf", MessageID: "m1@x"},
	)
	n, err := s.LiftFromMessages(t.Context(), []string{"m1@x"}, SourceRelayRefusal)
	if err != nil || n != 1 {
		t.Fatalf("LiftFromMessages = %d, %v; want 1", n, err)
	}
	hits, err := s.Check(t.Context(), []Key{
		{Stream: StreamTransactional, Address: "a@example.com"},
		{Stream: StreamTransactional, Address: "b@example.com"},
		{Stream: StreamTransactional, Address: "c@example.com"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 2 {
		t.Errorf("after lifting m1's refusal, %d addresses are suppressed, want b (another mail) and c (a complaint): %v", len(hits), hits)
	}
	if n, err := s.LiftFromMessages(t.Context(), nil, SourceRelayRefusal); err != nil || n != 0 {
		t.Errorf("LiftFromMessages of no mails = %d, %v", n, err)
	}
}
