package tests

import (
	"crypto/tls"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestOpsTLSClients runs the real binary with a certificate made by
// crypto/x509 for this test: redis-cli --tls and go-redis are served when
// they trust its CA and refused when they trust another one or speak plain
// TCP; with tls-ca-cert-file, only clients presenting a certificate that
// CA signed get in (on 0.0.0.0, which protected mode then allows).
func TestOpsTLSClients(t *testing.T) {
	t.Parallel()
	cli := testsrv.Need(t, "redis-cli")
	bin := testsrv.BuildLockproxy(t)
	f := testsrv.NewTLSFiles(t)
	ctx := t.Context()

	cliRun := func(addr string, args ...string) (string, error) {
		host, port := clientSplitAddr(addr)
		out, err := exec.CommandContext(ctx, cli, append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	goRedis := func(addr string, tc *tls.Config) error {
		c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: tc, MaxRetries: -1, DialTimeout: 10 * time.Second})
		defer c.Close()
		if err := c.SetArgs(ctx, "tls:k", "tok", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); err != nil {
			return err
		}
		return c.Del(ctx, "tls:k").Err()
	}
	otherRoots := func() *tls.Config {
		o := *f
		o.CA = f.OtherCA
		return o.ClientConfig(t, false)
	}()

	t.Run("server certificate", func(t *testing.T) {
		t.Parallel()
		lp := testsrv.StartBinary(t, bin, "--tls-cert-file", f.Cert, "--tls-key-file", f.Key)
		if out, err := cliRun(lp.Addr, "--tls", "--cacert", f.CA, "SET", "cli", "tok", "NX", "PX", "10000"); err != nil || out != "OK" {
			t.Errorf("redis-cli --tls --cacert CA: %q, %v; want OK", out, err)
		}
		if out, _ := cliRun(lp.Addr, "--tls", "--cacert", f.CA, "-3", "GET", "cli"); out != "tok" {
			t.Errorf("redis-cli --tls -3 GET = %q; want tok", out)
		}
		if out, _ := cliRun(lp.Addr, "--tls", "--cacert", f.OtherCA, "PING"); out == "PONG" || !strings.Contains(out, "certificate verify failed") {
			t.Errorf("redis-cli trusting another CA: %q; want a certificate verify failure", out)
		}
		if out, _ := cliRun(lp.Addr, "PING"); out == "PONG" {
			t.Errorf("plain redis-cli against the TLS listener: %q; want a failure", out)
		}
		if err := goRedis(lp.Addr, f.ClientConfig(t, false)); err != nil {
			t.Errorf("go-redis with TLS: %v", err)
		}
		if err := goRedis(lp.Addr, otherRoots); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("go-redis trusting another CA: %v; want a certificate error", err)
		}
	})

	t.Run("client certificates", func(t *testing.T) {
		t.Parallel()
		port := strconv.Itoa(testsrv.FreePort(t))
		lp := testsrv.StartBinary(t, bin, "--listen", "0.0.0.0:"+port,
			"--tls-cert-file", f.Cert, "--tls-key-file", f.Key, "--tls-ca-cert-file", f.CA)
		if out, err := cliRun(lp.Addr, "--tls", "--cacert", f.CA, "--cert", f.ClientCert, "--key", f.ClientKey, "SET", "cli", "tok", "NX"); err != nil || out != "OK" {
			t.Errorf("redis-cli with a client certificate: %q, %v; want OK", out, err)
		}
		if out, _ := cliRun(lp.Addr, "--tls", "--cacert", f.CA, "PING"); out == "PONG" {
			t.Errorf("redis-cli without a client certificate: %q; want refused", out)
		}
		if out, _ := cliRun(lp.Addr, "--tls", "--cacert", f.CA, "--cert", f.OtherClientCert, "--key", f.OtherClient, "PING"); out == "PONG" {
			t.Errorf("redis-cli with another CA's client certificate: %q; want refused", out)
		}
		if err := goRedis(lp.Addr, f.ClientConfig(t, true)); err != nil {
			t.Errorf("go-redis with a client certificate: %v", err)
		}
		if err := goRedis(lp.Addr, f.ClientConfig(t, false)); err == nil {
			t.Error("go-redis without a client certificate was served; want refused")
		}
		stranger := f.ClientConfig(t, false)
		cert, err := tls.LoadX509KeyPair(f.OtherClientCert, f.OtherClient)
		if err != nil {
			t.Fatal(err)
		}
		stranger.Certificates = []tls.Certificate{cert}
		if err := goRedis(lp.Addr, stranger); err == nil {
			t.Error("go-redis with another CA's client certificate was served; want refused")
		}
		if !strings.Contains(lp.Logs(), "client_certs=true") {
			t.Errorf("the start line does not say client certificates are required:\n%s", lp.Logs())
		}
	})
}

// TestOpsTLSQuorum runs the real binary in quorum mode over three real
// redis-servers that speak TLS on their --tls-port and require client
// certificates: with quorum-tls, the node CA and a client certificate, a
// lock cycle works (the TLS ports speak nothing else); trusting another CA
// or without the client certificate, no node answers and the client gets
// TRYAGAIN, never a false OK or nil.
func TestOpsTLSQuorum(t *testing.T) {
	t.Parallel()
	bin := testsrv.BuildLockproxy(t)
	f := testsrv.NewTLSFiles(t)
	var tlsNodes []string
	for range 3 {
		port := strconv.Itoa(testsrv.FreePort(t))
		testsrv.StartRedis(t, "--tls-port", port, "--tls-cert-file", f.Cert, "--tls-key-file", f.Key, "--tls-ca-cert-file", f.CA)
		tlsNodes = append(tlsNodes, "127.0.0.1:"+port)
	}
	nodes := strings.Join(tlsNodes, ",")
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		args []string
		ok   bool
	}{
		{"verified, with client certificate", []string{"--quorum-tls-ca-cert-file", f.CA, "--quorum-tls-cert-file", f.ClientCert, "--quorum-tls-key-file", f.ClientKey}, true},
		{"another CA", []string{"--quorum-tls-ca-cert-file", f.OtherCA, "--quorum-tls-cert-file", f.ClientCert, "--quorum-tls-key-file", f.ClientKey}, false},
		{"no client certificate", []string{"--quorum-tls-ca-cert-file", f.CA}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lp := testsrv.StartBinary(t, bin, append([]string{"--backend", "quorum", "--quorum-nodes", nodes,
				"--quorum-node-timeout", "1s", "--quorum-tls", "yes"}, tc.args...)...)
			c := redis.NewClient(&redis.Options{Addr: lp.Addr, MaxRetries: -1, ReadTimeout: 30 * time.Second})
			defer c.Close()
			err := c.SetArgs(ctx, "tlsq:k", "tok", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err()
			if !tc.ok {
				if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
					t.Errorf("SET NX = %v; want TRYAGAIN (no node reachable over TLS)", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("SET NX over TLS nodes: %v\n%s", err, lp.Logs())
			}
			if v, err := c.Get(ctx, "tlsq:k").Result(); err != nil || v != "tok" {
				t.Errorf("GET = %q, %v; want tok", v, err)
			}
			if n, err := c.Eval(ctx, clientRelease, []string{"tlsq:k"}, "tok").Int(); err != nil || n != 1 {
				t.Errorf("release script = %d, %v; want 1", n, err)
			}
		})
	}
}
