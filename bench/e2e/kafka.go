package main

import (
	"fmt"

	"github.com/postline/postline/kafkaconn"
)

// plainCluster is the benchmark's Kafka: plaintext brokers on loopback, as
// the local stack runs them. It panics on a bad address, which is a typo in
// a flag.
func plainCluster(brokers ...string) *kafkaconn.Cluster {
	c, err := kafkaconn.New(kafkaconn.Config{Brokers: brokers, ClientID: "postline-bench"})
	if err != nil {
		panic(fmt.Sprintf("kafka %v: %v", brokers, err))
	}
	return c
}
