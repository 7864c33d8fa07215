package app

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/switchboard-ai/switchboard/pkg/tlsfiles"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

// validate reports every invalid setting, and every pair that contradicts
// each other, at once.
func (c *Config) validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("--listen %q: %w", c.Listen, err))
	}
	if len(c.Etcd) == 0 {
		if c.DataDir == "" {
			errs = append(errs, errors.New("--data-dir is required with the embedded etcd"))
		}
		if _, _, err := net.SplitHostPort(c.EtcdListen); err != nil {
			errs = append(errs, fmt.Errorf("--etcd-listen %q: %w", c.EtcdListen, err))
		}
	}
	if c.BrokerSessionTTL != 0 && c.BrokerSessionTTL < 2*time.Second {
		errs = append(errs, fmt.Errorf("--broker-session-ttl %v must be at least 2s", c.BrokerSessionTTL))
	}
	if c.BrokerLeaseTerm < 0 || c.BrokerMaxLeaseTerm < 0 || (c.BrokerLeaseTerm > 0 && c.BrokerLeaseTerm < 200*time.Millisecond) ||
		(c.BrokerMaxLeaseTerm > 0 && c.BrokerLeaseTerm > c.BrokerMaxLeaseTerm) {
		errs = append(errs, fmt.Errorf("--broker-lease-term %v must be at least 200ms and at most --broker-max-lease-term %v", c.BrokerLeaseTerm, c.BrokerMaxLeaseTerm))
	}
	if c.DrainDelay < 0 || c.ShutdownTimeout <= 0 {
		errs = append(errs, errors.New("--drain-delay must be >= 0 and --shutdown-timeout > 0"))
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level %q: %w", c.LogLevel, err))
	}
	if c.ID == "" {
		c.ID = "decider"
	}
	if err := validate.Name("--region", c.Region); err != nil {
		errs = append(errs, err)
	}
	if _, ok := cooldown.Rules[c.CooldownRule]; !ok && c.CooldownRule != "" {
		errs = append(errs, fmt.Errorf("--cooldown-rule: unknown rule %q (breaker or first-refusal)", c.CooldownRule))
	}
	if c.ProbeInterval < 0 || c.Cooldown < 0 || c.CooldownWindow < 0 || c.StatsSnapshotInterval < 0 || c.CooldownErrors < 0 {
		errs = append(errs, errors.New("--probe-interval, --cooldown, --cooldown-window, --stats-snapshot-interval and --cooldown-errors must not be negative"))
	}
	if c.ExperimentMinBlock < 0 || c.ExperimentSaveInterval < 0 {
		errs = append(errs, errors.New("--experiment-min-block and --experiment-save-interval must not be negative"))
	}
	if c.HedgeBudgetUSD < 0 || c.HedgeBudgetBurst < 0 || c.HedgeDelay < 0 || c.FastEnough < 0 || c.HedgeFrom < 0 || c.HedgeImmediateFrom < 0 || c.ActivityRetention < 0 {
		errs = append(errs, errors.New("--hedge-*, --fast-enough and --activity-retention must not be negative"))
	}
	if c.BrokerStateBytes != 0 && c.BrokerStateBytes < minBrokerStateBytes {
		errs = append(errs, fmt.Errorf("--broker-state-bytes %d must be at least %d", c.BrokerStateBytes, minBrokerStateBytes))
	}
	if c.QueueReattach < 0 {
		errs = append(errs, fmt.Errorf("--queue-reattach %v must not be negative", c.QueueReattach))
	}
	if c.StickyTTL < 0 {
		errs = append(errs, fmt.Errorf("--sticky-ttl %v must not be negative", c.StickyTTL))
	}
	if c.Exploration >= 1 {
		errs = append(errs, fmt.Errorf("--exploration %g must be below 1", c.Exploration))
	}
	if _, err := routing.ParsePolicy(c.RoutingPolicy); err != nil {
		errs = append(errs, fmt.Errorf("--routing-policy: %w", err))
	}
	if c.RoutingCostHalfLife < 0 || c.RoutingCostLoadWindow < 0 {
		errs = append(errs, errors.New("--routing-cost-half-life and --routing-cost-load-window must not be negative"))
	}
	if c.RoutingCostMargin < 0 || c.RoutingCostMargin > 10 || c.RoutingCostFloor >= 0.5 {
		errs = append(errs, fmt.Errorf("--routing-cost-margin %g must be between 0 and 10 and --routing-cost-floor %g below 0.5", c.RoutingCostMargin, c.RoutingCostFloor))
	}
	errs = append(errs, c.validateTLS()...)
	return errors.Join(errs...)
}

// validateTLS checks the transport security flags agree with each other.
func (c *Config) validateTLS() []error {
	var errs []error
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-key-file go together"))
	}
	if c.TLSCertFile == "" && (c.TLSClientCAFile != "" || c.TLSCAFile != "") {
		errs = append(errs, errors.New("--tls-client-ca-file and --tls-ca-file need --tls-cert-file and --tls-key-file"))
	}
	if c.TLSCertFile == "" && c.PeerServerName != "" {
		errs = append(errs, errors.New("--peer-server-name needs --tls-cert-file and --tls-key-file"))
	}
	if c.HealthListen != "" {
		if _, _, err := net.SplitHostPort(c.HealthListen); err != nil {
			errs = append(errs, fmt.Errorf("--health-listen %q: %w", c.HealthListen, err))
		}
	}
	if _, err := c.Admin(); err != nil {
		errs = append(errs, err)
	}
	if c.TLSRefresh < 0 {
		errs = append(errs, fmt.Errorf("--tls-refresh %v must not be negative", c.TLSRefresh))
	}
	if c.Plaintext && c.TLSCertFile != "" {
		errs = append(errs, errors.New("--plaintext and --tls-cert-file exclude each other"))
	}
	if (c.EtcdCertFile == "") != (c.EtcdKeyFile == "") {
		errs = append(errs, errors.New("--etcd-cert-file and --etcd-key-file go together"))
	}
	if len(c.Etcd) == 0 && (c.EtcdCAFile != "" || c.EtcdCertFile != "") {
		errs = append(errs, errors.New("--etcd-ca-file, --etcd-cert-file and --etcd-key-file are for an external etcd: set --etcd"))
	}
	return errs
}

// checkPlaintext refuses to serve plaintext where other machines can
// connect unless that was chosen explicitly.
func (c *Config) checkPlaintext() error {
	if c.TLSCertFile != "" || c.Plaintext || tlsfiles.Loopback(c.Listen) {
		return nil
	}
	return fmt.Errorf("--listen %s is reachable from other machines and no TLS is configured: "+
		"serve TLS with --tls-cert-file and --tls-key-file (and --tls-client-ca-file for mutual TLS), "+
		"or choose plaintext explicitly with --plaintext", c.Listen)
}

// etcdTLS returns the TLS configuration of the external etcd's client: nil
// for the embedded etcd, and for http:// endpoints without TLS flags.
func (c *Config) etcdTLS() (*tls.Config, error) {
	if len(c.Etcd) == 0 {
		return nil, nil
	}
	https := false
	for _, e := range c.Etcd {
		https = https || strings.HasPrefix(e, "https://")
	}
	if !https && c.EtcdCAFile == "" && c.EtcdCertFile == "" {
		return nil, nil
	}
	info := transport.TLSInfo{TrustedCAFile: c.EtcdCAFile, CertFile: c.EtcdCertFile, KeyFile: c.EtcdKeyFile}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: %w", err)
	}
	cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
	return cfg, nil
}

// firstDNSName returns the first DNS name of the certificate in certFile,
// "" when it names none.
func firstDNSName(certFile string) (string, error) {
	data, err := os.ReadFile(certFile)
	if err != nil {
		return "", fmt.Errorf("--tls-cert-file: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return "", fmt.Errorf("--tls-cert-file %s holds no PEM certificate", certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("--tls-cert-file %s: %w", certFile, err)
	}
	if len(cert.DNSNames) == 0 {
		return "", nil
	}
	return cert.DNSNames[0], nil
}
