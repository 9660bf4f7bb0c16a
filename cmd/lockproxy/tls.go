package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// serverTLS returns the clients' TLS configuration, or nil when
// tls-cert-file is empty. With tls-ca-cert-file, clients must present a
// certificate that CA signed (Redis's tls-auth-clients yes).
func (c Config) serverTLS() (*tls.Config, error) {
	if c.TLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.TLSCACertFile != "" {
		pool, err := loadCA(c.TLSCACertFile)
		if err != nil {
			return nil, err
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// quorumTLS returns the TLS configuration toward quorum nodes, or nil when
// quorum-tls is off: the nodes are verified against quorum-tls-ca-cert-file
// (the system's roots when empty), and the client certificate is presented
// when given (Redis asks for one unless tls-auth-clients is no).
func (c Config) quorumTLS() (*tls.Config, error) {
	if !c.QuorumTLS {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.QuorumTLSCACertFile != "" {
		pool, err := loadCA(c.QuorumTLSCACertFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if c.QuorumTLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.QuorumTLSCertFile, c.QuorumTLSKeyFile)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func loadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("no PEM certificate in " + path)
	}
	return pool, nil
}

// tlsDialer dials quorum nodes with TLS (quorum.Config.Dialer): the
// handshake is bounded by the node's dial context, and the node's host
// name (or IP) is what its certificate must name.
func tlsDialer(tc *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c := tc.Clone()
		if c.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			c.ServerName = host
		}
		d := &tls.Dialer{Config: c}
		return d.DialContext(ctx, network, addr)
	}
}

// validateTLS adds the problems of the TLS keys.
func (c Config) validateTLS(add func(key, problem, fix string)) {
	switch {
	case c.TLSCertFile != "" && c.TLSKeyFile == "":
		add("tls-key-file", "empty while tls-cert-file is set", "set both, or neither for plain TCP")
	case c.TLSCertFile == "" && c.TLSKeyFile != "":
		add("tls-cert-file", "empty while tls-key-file is set", "set both, or neither for plain TCP")
	case c.TLSCertFile == "" && c.TLSCACertFile != "":
		add("tls-ca-cert-file", "set while tls-cert-file is empty", "client certificates need TLS: set tls-cert-file and tls-key-file")
	case c.TLSCertFile != "":
		if _, err := c.serverTLS(); err != nil {
			add("tls-cert-file", "cannot load the certificate, key or CA: "+err.Error(), "PEM files readable by lockproxy")
		}
	}
	if !c.QuorumTLS {
		for _, f := range []struct{ key, v string }{
			{"quorum-tls-ca-cert-file", c.QuorumTLSCACertFile}, {"quorum-tls-cert-file", c.QuorumTLSCertFile}, {"quorum-tls-key-file", c.QuorumTLSKeyFile},
		} {
			if f.v != "" {
				add(f.key, "set while quorum-tls is no", "set quorum-tls: yes")
			}
		}
		return
	}
	if (c.QuorumTLSCertFile == "") != (c.QuorumTLSKeyFile == "") {
		add("quorum-tls-cert-file", "quorum-tls-cert-file and quorum-tls-key-file go together", "set both, or neither when the nodes do not ask for client certificates")
	} else if _, err := c.quorumTLS(); err != nil {
		add("quorum-tls-ca-cert-file", "cannot load the node CA or client certificate: "+err.Error(), "PEM files readable by lockproxy")
	}
	for _, n := range c.nodes() {
		if strings.HasPrefix(n, "rediss://") {
			add("quorum-nodes", fmt.Sprintf("%q is a rediss:// URL while quorum-tls is yes", n), "write redis://… or host:port: quorum-tls makes every node TLS")
		}
	}
}
