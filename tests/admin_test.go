package tests

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestAdminEndpoints: /metrics counts real traffic by command and outcome,
// and /readyz flips to 503 when the quorum is lost.
func TestAdminEndpoints(t *testing.T) {
	t.Parallel()
	nodes := []*testsrv.Redis{testsrv.StartRedis(t), testsrv.StartRedis(t), testsrv.StartRedis(t)}
	b, err := quorum.New(quorum.Config{Nodes: []string{nodes[0].Addr, nodes[1].Addr, nodes[2].Addr},
		NodeTimeout: time.Second, CheckInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	addr := testsrv.StartLockproxy(t, proxy.Config{Registerer: reg, BackendName: "quorum"}, b)
	admin := httptest.NewServer(proxy.AdminHandler(reg, b))
	defer admin.Close()
	get := func(path string) (int, string) { t.Helper(); return httpGet(t, admin.URL+path) }

	c := dialRESP(t, addr)
	for _, cmd := range [][]string{{"SET", "m", "a", "NX", "PX", "10000"}, {"SET", "m", "b", "NX", "PX", "10000"}, {"NOSUCH"}, {"GET", "m"}} {
		if _, err := c.do(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	_, metrics := get("/metrics")
	for _, want := range []string{
		`lockproxy_commands_total{command="set",outcome="ok"} 1`,
		`lockproxy_commands_total{command="set",outcome="nil"} 1`,
		`lockproxy_commands_total{command="unknown",outcome="error"} 1`,
		`lockproxy_commands_total{command="get",outcome="ok"} 1`,
		`lockproxy_command_duration_seconds_count{command="set"} 2`,
		`lockproxy_connected_clients 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, body := get("/readyz"); code != 200 {
		t.Fatalf("/readyz with three nodes = %d %q", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz = %d", code)
	}
	nodes[0].Kill()
	nodes[1].Kill()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get("/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "1 of 3 nodes usable") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after losing two of three nodes = %d %q; want 503", code, body)
		}
		time.Sleep(20 * time.Millisecond) // polling the monitor
	}
	if r, _ := c.do("SET", "m2", "a", "NX", "PX", "10000"); !strings.HasPrefix(r, "-TRYAGAIN quorum not reached: 1 of 3") {
		t.Errorf("SET with one node of three = %q; want TRYAGAIN", r)
	}
}

// httpGet fetches url and returns the status code and the body.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestMetricsCreatedOnUse: an idle server's /metrics holds the lock
// commands' series that operators alert on (at zero), not a series per
// command and outcome; another command's series appear once it is answered.
func TestMetricsCreatedOnUse(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := memory.New(memory.Config{})
	addr := testsrv.StartLockproxy(t, proxy.Config{Registerer: reg}, b)
	admin := httptest.NewServer(proxy.AdminHandler(reg, b))
	defer admin.Close()

	_, idle := httpGet(t, admin.URL+"/metrics")
	for _, want := range []string{
		`lockproxy_commands_total{command="set",outcome="tryagain"} 0`,
		`lockproxy_commands_total{command="evalsha",outcome="error"} 0`,
		`lockproxy_command_duration_seconds_count{command="eval"} 0`,
	} {
		if !strings.Contains(idle, want) {
			t.Errorf("idle /metrics lacks %q", want)
		}
	}
	if strings.Contains(idle, `command="echo"`) {
		t.Errorf("idle /metrics has ECHO's series before any ECHO")
	}
	if n := strings.Count(idle, "\nlockproxy_"); n > 200 {
		t.Errorf("idle /metrics has %d lockproxy_ lines; want the alerted series only (≤ 200)", n)
	}

	if _, err := dialRESP(t, addr).do("ECHO", "x"); err != nil {
		t.Fatal(err)
	}
	if _, m := httpGet(t, admin.URL+"/metrics"); !strings.Contains(m, `lockproxy_commands_total{command="echo",outcome="ok"} 1`) {
		t.Errorf("/metrics after ECHO lacks its ok count")
	}
}
