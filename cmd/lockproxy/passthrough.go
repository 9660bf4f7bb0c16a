package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"

	"github.com/lockproxy/lockproxy/proxy"
)

// upstream parses the passthrough URL: redis://[user:pass@]host[:port] or
// rediss://… (TLS, verified against the system's roots). nil when empty.
func (c Config) upstream() (*proxy.Upstream, error) {
	if c.Passthrough == "" {
		return nil, nil
	}
	u, err := url.Parse(c.Passthrough)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" || u.Opaque != "" {
		return nil, fmt.Errorf("%s is not a redis:// or rediss:// URL", maskURL(c.Passthrough))
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("a database in the URL (%q) is not supported", u.Path)
	}
	if u.RawQuery != "" {
		return nil, fmt.Errorf("URL options (?%s) are not supported", u.RawQuery)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "6379")
	}
	up := &proxy.Upstream{Addr: addr}
	if u.User != nil {
		up.Username = u.User.Username()
		up.Password, _ = u.User.Password()
		if _, hasPass := u.User.Password(); !hasPass { // redis://secret@host: the password alone, as redis-cli -u
			up.Username, up.Password = "", u.User.Username()
		}
	}
	if u.Scheme == "rediss" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Hostname()}
		up.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := &tls.Dialer{Config: tc}
			return d.DialContext(ctx, network, addr)
		}
	}
	return up, nil
}

// maskURL hides a URL's password for logs and errors.
func maskURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		if err != nil {
			return "(url)"
		}
		return s
	}
	return u.Redacted()
}
