// Package benchkafka gives the benchmark harnesses their Kafka: the local
// stack's plaintext brokers on loopback, built the way the binaries build
// theirs (package kafkaconn). It owns nothing else.
package benchkafka

import (
	"fmt"

	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/kafkaconn"
)

// Cluster returns a plaintext cluster of brokers on loopback. It panics on a
// bad address, which is a typo in a benchmark flag.
func Cluster(brokers ...string) *kafkaclient.Cluster {
	c, err := kafkaclient.New(kafkaconn.Config{Brokers: brokers, ClientID: "postline-bench"})
	if err != nil {
		panic(fmt.Sprintf("kafka %v: %v", brokers, err))
	}
	return c
}
