package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/twmb/franz-go/pkg/sr"
)

// security holds the TLS and SASL flags for Kafka and TLS for the schema
// registry. Every flag has an environment form so secrets need not be on the
// command line.
type security struct {
	fs            *pflag.FlagSet
	tlsEnv        string // KAFKA_TLS, the default of --kafka-tls
	tls           bool
	tlsCA         string
	tlsCert       string
	tlsKey        string
	tlsSkipVerify bool
	saslMechanism string
	saslUser      string
	saslPassword  string
	registryCA    string
}

// register adds the Kafka TLS and SASL flags to f, and --registry-tls-ca
// when the command talks to the schema registry (withRegistry).
func (s *security) register(f *pflag.FlagSet, withRegistry bool) {
	s.fs = f
	s.tlsEnv = os.Getenv("KAFKA_TLS")
	tlsDefault, _ := strconv.ParseBool(s.tlsEnv)
	f.BoolVar(&s.tls, "kafka-tls", tlsDefault, "connect to Kafka over TLS (env KAFKA_TLS=true)")
	f.StringVar(&s.tlsCA, "kafka-tls-ca", os.Getenv("KAFKA_TLS_CA"), "PEM file of the CA that signed the brokers' certificates (env KAFKA_TLS_CA; default: system roots)")
	f.StringVar(&s.tlsCert, "kafka-tls-cert", os.Getenv("KAFKA_TLS_CERT"), "PEM client certificate for mutual TLS (env KAFKA_TLS_CERT)")
	f.StringVar(&s.tlsKey, "kafka-tls-key", os.Getenv("KAFKA_TLS_KEY"), "PEM client key for mutual TLS (env KAFKA_TLS_KEY)")
	f.BoolVar(&s.tlsSkipVerify, "kafka-tls-insecure-skip-verify", false, "do not verify the brokers' certificates (testing only)")
	f.StringVar(&s.saslMechanism, "sasl-mechanism", os.Getenv("KAFKA_SASL_MECHANISM"), "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (env KAFKA_SASL_MECHANISM; empty: no SASL)")
	f.StringVar(&s.saslUser, "sasl-user", os.Getenv("KAFKA_SASL_USER"), "SASL user (env KAFKA_SASL_USER)")
	f.StringVar(&s.saslPassword, "sasl-password", os.Getenv("KAFKA_SASL_PASSWORD"), "SASL password (env KAFKA_SASL_PASSWORD)")
	if !withRegistry {
		return
	}
	f.StringVar(&s.registryCA, "registry-tls-ca", os.Getenv("SCHEMA_REGISTRY_TLS_CA"), "PEM file of the CA of an https schema registry (env SCHEMA_REGISTRY_TLS_CA; default: system roots)")
}

// kafkaOpts returns the franz-go options for TLS and SASL, or an error naming
// the flag that is wrong.
func (s *security) kafkaOpts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if _, err := strconv.ParseBool(s.tlsEnv); s.tlsEnv != "" && err != nil && !s.fs.Changed("kafka-tls") {
		return nil, fmt.Errorf("KAFKA_TLS %q (the default of --kafka-tls): want true or false", s.tlsEnv)
	}
	if s.tlsSkipVerify && !s.tls && s.tlsCA == "" && s.tlsCert == "" && s.tlsKey == "" {
		return nil, fmt.Errorf("--kafka-tls-insecure-skip-verify needs --kafka-tls: without TLS there is no certificate to verify")
	}
	if s.tls || s.tlsCA != "" || s.tlsCert != "" || s.tlsKey != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: s.tlsSkipVerify} //nolint:gosec // opt-in flag for tests
		if s.tlsCA != "" {
			pool, err := loadCA(s.tlsCA)
			if err != nil {
				return nil, fmt.Errorf("--kafka-tls-ca: %w", err)
			}
			cfg.RootCAs = pool
		}
		if (s.tlsCert == "") != (s.tlsKey == "") {
			return nil, fmt.Errorf("--kafka-tls-cert and --kafka-tls-key go together: give both for mutual TLS, or neither")
		}
		if s.tlsCert != "" {
			cert, err := tls.LoadX509KeyPair(s.tlsCert, s.tlsKey)
			if err != nil {
				return nil, fmt.Errorf("--kafka-tls-cert/--kafka-tls-key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	switch m := strings.ToUpper(s.saslMechanism); m {
	case "":
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: s.saslUser, Pass: s.saslPassword}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.saslUser, Pass: s.saslPassword}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.saslUser, Pass: s.saslPassword}.AsSha512Mechanism()))
	default:
		return nil, fmt.Errorf("--sasl-mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.saslMechanism)
	}
	if s.saslMechanism != "" && s.saslUser == "" {
		return nil, fmt.Errorf("--sasl-mechanism %s needs --sasl-user (or KAFKA_SASL_USER)", s.saslMechanism)
	}
	if s.saslMechanism == "" && (s.saslUser != "" || s.saslPassword != "") {
		flag := "--sasl-user (or KAFKA_SASL_USER)"
		if s.saslUser == "" {
			flag = "--sasl-password (or KAFKA_SASL_PASSWORD)"
		}
		return nil, fmt.Errorf("%s needs --sasl-mechanism (or KAFKA_SASL_MECHANISM): PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; without one no SASL is used", flag)
	}
	return opts, nil
}

// registryOpts returns the schema registry client's TLS option.
func (s *security) registryOpts() ([]sr.ClientOpt, error) {
	if s.registryCA == "" {
		return nil, nil
	}
	pool, err := loadCA(s.registryCA)
	if err != nil {
		return nil, fmt.Errorf("--registry-tls-ca: %w", err)
	}
	return []sr.ClientOpt{sr.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool})}, nil
}

func loadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}
