package console

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// CheckPlainListen refuses to serve without TLS on an address other than
// loopback: sessions and mail data must not cross a network in clear.
func CheckPlainListen(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsLoopback() {
		return nil
	}
	if host == "" {
		host = "every interface"
	}
	return fmt.Errorf("address %q listens on %s without TLS: set the certificate and key files, or listen on 127.0.0.1 (and put a TLS proxy in front)", addr, host)
}

// TLSConfig loads the console's certificate and key; both empty means no
// TLS, one without the other is an error.
func TLSConfig(certFile, keyFile string) (*tls.Config, error) {
	if certFile == "" && keyFile == "" {
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, errors.New("set both the certificate and the key file, or neither")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
