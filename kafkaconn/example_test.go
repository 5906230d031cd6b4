package kafkaconn_test

import (
	"fmt"

	"github.com/postline/postline/kafkaconn"
)

// One Config reaches a managed cluster: TLS verified against the cluster's
// CA (on by default for brokers off this machine) and SCRAM credentials.
// job.NewPublisher and event.NewReader both take it.
func ExampleConfig() {
	conn := kafkaconn.Config{
		Brokers: []string{"kafka-1.example.com:9094", "kafka-2.example.com:9094"},
		TLS:     kafkaconn.TLSConfig{CAFile: "/etc/billing/kafka-ca.pem"},
		SASL: kafkaconn.SASLConfig{
			Mechanism: kafkaconn.MechanismSCRAMSHA512,
			Username:  "billing-app",
			Password:  "from-your-secret-store",
		},
	}
	fmt.Println(conn.WithDefaults().Validate(), conn.TLSEnabled())

	conn.SASL.Password = ""
	fmt.Println(conn.WithDefaults().Validate())
	// Output:
	// <nil> true
	// kafka: SASL SCRAM-SHA-512 needs Username and Password
}
