package job

import (
	"testing"

	"github.com/postline/postline/internal/topic"
)

func TestPublisherDefaultIsTheJobsTopicSize(t *testing.T) {
	if defaultTopicMaxMessageBytes != topic.MaxMessageBytes {
		t.Errorf("defaultTopicMaxMessageBytes = %d, topic.MaxMessageBytes = %d: the publisher's default must be the jobs topic's", defaultTopicMaxMessageBytes, topic.MaxMessageBytes)
	}
	if defaultTopicMaxMessageBytes != 2*defaultMaxMessageBytes {
		t.Errorf("defaultTopicMaxMessageBytes = %d: want twice the record limit %d", defaultTopicMaxMessageBytes, defaultMaxMessageBytes)
	}
}
