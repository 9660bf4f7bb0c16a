package tests

import (
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// artifactsEnv names the directory where tests keep what a person looks at
// afterwards (the status page's screenshots); unset, a temporary directory
// removed with the test.
const artifactsEnv = "LOCKPROXY_TEST_ARTIFACTS"

// TestStatusPage renders the admin port's status page of a real lockproxy
// process in Debian's headless Chromium, in each mode (memory, quorum over
// three redis-servers, postgres, migrating from a legacy Redis), with
// locks taken by a Redis client: the rendered DOM names the held keys, the
// contended key and the mode's panel (the nodes, PostgreSQL, the
// migration's direct clients), and a desktop and a phone-sized screenshot
// are kept under $LOCKPROXY_TEST_ARTIFACTS/TestStatusPage. A missing
// chromium fails the test: ./test.sh installs it.
func TestStatusPage(t *testing.T) {
	t.Parallel()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (./test.sh installs it: apt-get install chromium): %v", err)
	}
	dir := os.Getenv(artifactsEnv)
	if dir == "" {
		dir = t.ArtifactDir() // kept under go test's -outputdir with -artifacts
	}
	dir = filepath.Join(dir, "TestStatusPage")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := testsrv.BuildLockproxy(t)

	for _, mode := range []string{"memory", "quorum", "postgres", "migrating"} {
		t.Run(mode, func(t *testing.T) {
			var args, want []string
			var legacy *testsrv.Redis
			var nodes []*testsrv.Redis
			switch mode {
			case "quorum":
				var addrs []string
				for range 3 {
					n := testsrv.StartRedis(t)
					nodes, addrs = append(nodes, n), append(addrs, n.Addr)
				}
				args = []string{"--backend", "quorum", "--quorum-nodes", strings.Join(addrs, ","), "--quorum-node-timeout", "300ms"}
				want = append([]string{`id="nodes"`, "Quorum nodes"}, addrs...)
			case "postgres":
				dsn := testsrv.SharedPostgres(t).NewDatabase(t)
				args = []string{"--backend", "postgres", "--postgres-dsn", dsn, "--postgres-lease-row-delay", testsrv.PostgresRowDelay(t).String()}
				want = []string{`id="postgres"`, "advisory", "holder sessions", " up"}
			case "migrating":
				legacy = testsrv.StartRedis(t)
				args = []string{"--migrate-from", "redis://" + legacy.Addr}
				want = []string{`id="migration"`, "1 still connected directly", "s ago", "<polyline"}
			}
			lp := testsrv.StartBinary(t, bin, args...)
			ctx := t.Context()
			c := redis.NewClient(&redis.Options{Addr: lp.Addr, MaxRetries: -1, ClientName: "billing-worker"})
			defer c.Close()
			keys := []string{"orders:" + mode + ":1042", "orders:" + mode + ":1043", "reports:" + mode + ":nightly"}
			for i, k := range keys {
				ttl := []time.Duration{5 * time.Minute, time.Minute, 2 * time.Hour}[i]
				if err := c.SetArgs(ctx, k, "token-"+k, redis.SetArgs{Mode: "NX", TTL: ttl}).Err(); err != nil {
					t.Fatalf("SET %s NX: %v", k, err)
				}
			}
			for range 3 {
				if err := c.SetArgs(ctx, keys[0], "another", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); err != redis.Nil {
					t.Fatalf("SET %s NX while held = %v; want nil", keys[0], err)
				}
			}
			want = append(want, keys...)
			// The holder, with the granting instance.
			want = append(want, "billing-worker via ")
			want = append(want, `<td class="key"><code>`+keys[0]+`</code></td><td class="n">0</td><td class="n">3</td>`) // most contended
			switch mode {
			case "quorum": // a TRYAGAIN: two of three nodes paused
				nodes[1].Stop()
				nodes[2].Stop()
				err := c.SetArgs(ctx, "orders:quorum:1044", "t", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err()
				nodes[1].Cont()
				nodes[2].Cont()
				if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
					t.Fatalf("SET NX with two of three nodes paused = %v; want TRYAGAIN", err)
				}
				want = append(want, "TRYAGAIN quorum not reached")
			case "migrating": // a client still on the legacy Redis
				direct := redis.NewClient(&redis.Options{Addr: legacy.Addr})
				defer direct.Close()
				if err := direct.Set(ctx, "legacy:only", "x", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				awaitMetrics(t, lp.Admin, "lockproxy_migration_legacy_clients 1")
			}

			url := "http://" + lp.Admin + "/"
			b := newBrowser(t, chromium)
			dom := b.html(t, url, 1280, 900)
			for _, w := range want {
				if !strings.Contains(dom, w) {
					t.Errorf("the page rendered by chromium lacks %q", w)
				}
			}
			if modeShown := map[string]string{"migrating": "memory, migrating"}[mode]; !strings.Contains(dom, "mode <b>"+orMode(modeShown, mode)+"</b>") {
				t.Errorf("the page does not name the mode %q", orMode(modeShown, mode))
			}
			if t.Failed() {
				t.Logf("the page:\n%s", dom)
			}
			checkLayouts(t, b, url, dir, mode)
			checkSortedTTLs(t, b, url, keys)
			checkConfirmedRelease(t, b, url, dir, mode, keys[2], func() int64 { return c.Exists(ctx, keys[2]).Val() })
		})
	}
}

func orMode(shown, mode string) string {
	if shown != "" {
		return shown
	}
	return mode
}

// checkPNG fails the test unless file is a w×h PNG image.
func checkPNG(t *testing.T, file string, w, h int) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil || cfg.Width != w || cfg.Height != h {
		t.Errorf("screenshot %s: %dx%d, %v; want a %dx%d PNG", file, cfg.Width, cfg.Height, err, w, h)
	}
}

// awaitMetrics polls the /metrics of the admin endpoint at admin until
// it has every line of want (each a whole line: name, labels and value)
// and returns it; the test fails after 20s.
func awaitMetrics(t *testing.T, admin string, want ...string) string {
	t.Helper()
	var body string
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; {
		var resp *http.Response
		if resp, err = http.Get("http://" + admin + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = "\n" + string(b)
			if !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(body, "\n"+w+"\n") }) {
				return body
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/metrics lacks %q after 20s (%v):%s", admin, want, err, body)
		}
		time.Sleep(50 * time.Millisecond) // polling the backend's status reads
	}
}
