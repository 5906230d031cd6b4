package delivery

import (
	"strings"

	"github.com/postline/postline/internal/unsubscribe"
	"github.com/postline/postline/job"
)

// wantsUnsubscribe reports whether j's copies get Postline's unsubscribe
// headers: a job that asks for them, and bulk mail that does not carry a
// List-Unsubscribe header of its own (its producer takes the unsubscribes
// in itself). Mailbox relays require one-click unsubscribe of bulk
// senders.
func wantsUnsubscribe(j *job.Job) bool {
	if j.Unsubscribe {
		return true
	}
	if j.Priority != job.PriorityBulk {
		return false
	}
	for name := range j.Headers {
		if strings.EqualFold(name, "List-Unsubscribe") {
			return false
		}
	}
	return true
}

// unsubscribeURIs returns the List-Unsubscribe URIs of r's copy of it, nil
// when it gets none. The token names r: every recipient's copy names its
// own address.
func (p *Pipeline) unsubscribeURIs(it *item, r *rcpt) []string {
	if p.unsubscribes == nil || !wantsUnsubscribe(&it.job) {
		return nil
	}
	return p.unsubscribes.URIs(unsubscribe.Token{Tenant: it.job.Tenant, Stream: stream(&it.job), Address: r.address,
		MessageID: it.job.MessageID, Recipient: r.index, Life: it.life})
}
