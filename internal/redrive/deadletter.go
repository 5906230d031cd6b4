package redrive

import (
	"slices"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/job"
)

// DeadLetter is one record of the dead-letter topic, as operators see it.
type DeadLetter struct {
	Time      time.Time `json:"time"`
	Partition int       `json:"partition"`
	Offset    int64     `json:"offset"`
	MessageID string    `json:"message_id"`
	// Tenant is the job's tenant; "" when it has none or the record is not
	// a job.
	Tenant            string `json:"tenant,omitempty"`
	Reason            string `json:"reason"`
	Class             string `json:"class"`
	Attempt           int    `json:"attempt"`
	Error             string `json:"error"`
	OriginalTopic     string `json:"original_topic"`
	OriginalPartition *int   `json:"original_partition"`
	OriginalOffset    *int64 `json:"original_offset"`
}

// ParseDeadLetter reads the dead-letter headers of m and the tenant of the
// job it holds. The time is the dead-letter time header, or the record
// timestamp when it is missing; the Message-ID is the record key.
func ParseDeadLetter(m kafka.Message) DeadLetter { return read(m).DeadLetter }

// letter is a dead letter with its record and decoded job.
type letter struct {
	DeadLetter
	msg    kafka.Message
	job    job.Job
	jobErr error // not a valid job: a re-drive would only dead-letter it again
}

func read(m kafka.Message) letter {
	c := jobheader.Carrier(m.Headers)
	l := letter{msg: m, DeadLetter: DeadLetter{
		Time:          m.Time,
		Partition:     m.Partition,
		Offset:        m.Offset,
		MessageID:     string(m.Key),
		Reason:        c.Get(jobheader.KeyDLQReason),
		Class:         c.Get(jobheader.KeyDLQClass),
		Attempt:       jobheader.Attempt(m.Headers),
		Error:         c.Get(jobheader.KeyDLQError),
		OriginalTopic: c.Get(jobheader.KeyDLQOriginalTopic),
	}}
	if t, err := time.Parse(time.RFC3339Nano, c.Get(jobheader.KeyDLQTime)); err == nil {
		l.Time = t
	}
	if p, err := strconv.Atoi(c.Get(jobheader.KeyDLQOriginalPartition)); err == nil {
		l.OriginalPartition = &p
	}
	if o, err := strconv.ParseInt(c.Get(jobheader.KeyDLQOriginalOffset), 10, 64); err == nil {
		l.OriginalOffset = &o
	}
	// Jobs carry no tenant header: the tenant is the document's. A job that
	// decodes but fails validation still names its tenant.
	l.job, l.jobErr = job.Decode(m.Value, job.Limits{})
	l.Tenant = l.job.Tenant
	return l
}

// dlqHeaders are the headers a re-drive strips: the dead-letter headers and
// the delay-topic headers of the failed attempt.
var dlqHeaders = []string{
	jobheader.KeyDLQReason, jobheader.KeyDLQClass, jobheader.KeyDLQError, jobheader.KeyDLQOriginalTopic,
	jobheader.KeyDLQOriginalPartition, jobheader.KeyDLQOriginalOffset, jobheader.KeyDLQTime, jobheader.KeyDLQOmitted,
	jobheader.KeyNotBefore, jobheader.KeyLastClass, jobheader.KeyThrottles,
}

// RedriveMessage is the record a re-drive publishes for the dead letter m:
// the same key and value, the dead-letter headers stripped, attempt 1 and
// first-seen now; other headers (the trace context) are kept.
func RedriveMessage(m kafka.Message, now time.Time) kafka.Message {
	var headers []kafka.Header
	for _, h := range m.Headers {
		if !slices.Contains(dlqHeaders, h.Key) {
			headers = append(headers, h)
		}
	}
	headers = jobheader.Set(headers, jobheader.KeyAttempt, "1")
	headers = jobheader.Set(headers, jobheader.KeyFirstSeen, jobheader.FormatTime(now))
	return kafka.Message{Key: m.Key, Value: m.Value, Headers: headers}
}
