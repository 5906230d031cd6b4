package writertest

import (
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/retry"
)

// The items the suite publishes through each writer and its stand-in.

// Letter is a dead letter of a record keyed key.
func Letter(key string) deadletter.Letter {
	return deadletter.Letter{Key: []byte(key), Value: []byte(`{"version":1}`), Topic: "mail.jobs", Offset: 7,
		Reason: deadletter.ReasonSMTPPermanent, Class: "permanent", Error: "550 5.1.1 no such user", Attempt: 1}
}

// Copy returns the retry copies of records keyed key, due in a minute, to
// tier (one the writer does not have makes an invalid copy).
func Copy(tier time.Duration) func(key string) retry.Copy {
	return func(key string) retry.Copy {
		return retry.Copy{Key: []byte(key), Value: []byte(`{"version":1}`), Attempt: 2,
			NotBefore: time.Now().Add(time.Minute), LastClass: "transient", Tier: tier}
	}
}

// Event is an accepted event of the mail key.
func Event(key string) event.Event {
	e := event.Event{Schema: event.Schema, Type: event.Accepted, At: time.Now().UTC(), MessageID: key,
		Recipient: "ada@example.com", Stream: event.StreamTransactional, Attempt: 1}
	e.ID = event.NewID(e.MessageID, 0, e.Type, 1)
	return e
}

// InvalidEvent is an event of the mail key without a recipient.
func InvalidEvent(key string) event.Event {
	e := Event(key)
	e.Recipient = ""
	return e
}
