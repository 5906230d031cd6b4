package config

import (
	"fmt"
	"os"
	"strings"

	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/kafkaconn"
)

// Kafka are the Kafka connection settings every binary shares; embed it in
// a binary's settings struct. Cluster turns them into the one
// kafkaclient.Cluster the binary builds all its Kafka clients from.
type Kafka struct {
	Brokers            []string `env:"POSTLINE_KAFKA_BROKERS" default:"127.0.0.1:9092" usage:"Kafka bootstrap brokers, comma-separated"`
	KafkaClientID      string   `env:"POSTLINE_KAFKA_CLIENT_ID" default:"" usage:"client ID sent to the brokers (their logs and quotas); defaults to postline-<binary>"`
	KafkaTLS           string   `env:"POSTLINE_KAFKA_TLS" default:"auto" usage:"TLS to the brokers: auto (on unless every broker is on loopback), on or off; certificates are always verified unless POSTLINE_KAFKA_TLS_INSECURE_SKIP_VERIFY"`
	KafkaTLSCAFile     string   `env:"POSTLINE_KAFKA_TLS_CA_FILE" default:"" usage:"PEM file of the CAs that sign the brokers' certificates; defaults to the system's roots"`
	KafkaTLSCertFile   string   `env:"POSTLINE_KAFKA_TLS_CERT_FILE" default:"" usage:"PEM client certificate, for brokers that authenticate clients by certificate"`
	KafkaTLSKeyFile    string   `env:"POSTLINE_KAFKA_TLS_KEY_FILE" default:"" usage:"PEM key of the client certificate"`
	KafkaTLSServerName string   `env:"POSTLINE_KAFKA_TLS_SERVER_NAME" default:"" usage:"name the brokers' certificates must carry; defaults to the host dialled"`
	KafkaTLSInsecure   bool     `env:"POSTLINE_KAFKA_TLS_INSECURE_SKIP_VERIFY" default:"false" usage:"accept any broker certificate (tests only: anyone on the path can then read the mail)"`
	KafkaSASLMechanism string   `env:"POSTLINE_KAFKA_SASL_MECHANISM" default:"" usage:"SASL mechanism: empty (none), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"`
	KafkaSASLUsername  string   `env:"POSTLINE_KAFKA_SASL_USERNAME" default:"" usage:"SASL user name"`
	KafkaSASLPassword  string   `env:"POSTLINE_KAFKA_SASL_PASSWORD" default:"" usage:"SASL password (prefer POSTLINE_KAFKA_SASL_PASSWORD_FILE); never logged"`
	KafkaSASLPassFile  string   `env:"POSTLINE_KAFKA_SASL_PASSWORD_FILE" default:"" usage:"file holding the SASL password (a mounted secret); trailing newlines are ignored"`
}

// kafkaSettingNames maps kafkaconn's field names to the settings, so that
// its errors name what the operator sets.
var kafkaSettingNames = map[string]string{
	"Brokers": "POSTLINE_KAFKA_BROKERS", "DialTimeout": "POSTLINE_KAFKA_BROKERS",
	"TLS.Mode": "POSTLINE_KAFKA_TLS", "TLS.CAFile": "POSTLINE_KAFKA_TLS_CA_FILE",
	"TLS.CertFile": "POSTLINE_KAFKA_TLS_CERT_FILE", "TLS.KeyFile": "POSTLINE_KAFKA_TLS_KEY_FILE",
	"SASL.Mechanism": "POSTLINE_KAFKA_SASL_MECHANISM", "Username": "POSTLINE_KAFKA_SASL_USERNAME",
	"Password": "POSTLINE_KAFKA_SASL_PASSWORD",
}

// Cluster builds the binary's kafkaclient.Cluster. binary names the client
// ID when POSTLINE_KAFKA_CLIENT_ID is empty ("worker" gives
// "postline-worker"). Errors name the setting and never hold the password.
func (k Kafka) Cluster(binary string) (*kafkaclient.Cluster, error) {
	password := k.KafkaSASLPassword
	if k.KafkaSASLPassFile != "" {
		if password != "" {
			return nil, fmt.Errorf("settings POSTLINE_KAFKA_SASL_PASSWORD and POSTLINE_KAFKA_SASL_PASSWORD_FILE: set one, not both")
		}
		b, err := os.ReadFile(k.KafkaSASLPassFile)
		if err != nil {
			// The path is not secret; os errors do not quote file contents.
			return nil, fmt.Errorf("setting POSTLINE_KAFKA_SASL_PASSWORD_FILE: %w", err)
		}
		password = strings.TrimRight(string(b), "\r\n")
	}
	clientID := k.KafkaClientID
	if clientID == "" {
		clientID = "postline-" + binary
	}
	c, err := kafkaclient.New(kafkaconn.Config{
		Brokers:  k.Brokers,
		ClientID: clientID,
		TLS: kafkaconn.TLSConfig{
			Mode:               kafkaconn.TLSMode(k.KafkaTLS),
			CAFile:             k.KafkaTLSCAFile,
			CertFile:           k.KafkaTLSCertFile,
			KeyFile:            k.KafkaTLSKeyFile,
			ServerName:         k.KafkaTLSServerName,
			InsecureSkipVerify: k.KafkaTLSInsecure,
		},
		SASL: kafkaconn.SASLConfig{
			Mechanism: kafkaconn.Mechanism(k.KafkaSASLMechanism),
			Username:  k.KafkaSASLUsername,
			Password:  password,
		},
	})
	if err != nil {
		return nil, NameSetting(err, kafkaSettingNames)
	}
	return c, nil
}
