package fleet

import (
	"context"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/kafkaclient"
)

// kafkaGroups reads consumer groups from a Kafka cluster.
type kafkaGroups struct {
	cluster *kafkaclient.Cluster
}

func (k kafkaGroups) open() (groupReader, func()) {
	client, closeConn := k.cluster.Client("fleet", 10*time.Second)
	return kafkaGroupReader{client: client}, closeConn
}

type kafkaGroupReader struct {
	client *kafka.Client
}

func (k kafkaGroupReader) membership(ctx context.Context, group string) (membership, error) {
	var out membership
	res, err := k.client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil {
		return out, err
	}
	for _, dg := range res.Groups {
		if dg.GroupID != group {
			continue
		}
		if dg.Error != nil {
			return out, dg.Error
		}
		out.State = dg.GroupState
		for _, m := range dg.Members {
			gm := GroupMember{MemberID: m.MemberID, ClientID: m.ClientID, ClientHost: m.ClientHost, Assigned: map[string][]int{}}
			for _, t := range m.MemberAssignments.Topics {
				gm.Assigned[t.Topic] = slices.Sorted(slices.Values(t.Partitions))
			}
			out.Members = append(out.Members, gm)
		}
	}
	return out, nil
}

func (k kafkaGroupReader) lag(ctx context.Context, group, topic string) (map[int]int64, error) {
	return consumer.Lag(ctx, k.client, topic, group)
}
