package proxy_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/proxy"
)

// adminServer is a running proxy with its admin handler served over HTTP.
type adminServer struct {
	*server
	url  string
	logs *testsrv.SyncBuffer
}

// startAdmin serves b with cfg (a registry and a logger added) and its
// admin handler on an httptest server.
func startAdmin(t *testing.T, cfg proxy.Config, b backend.Backend) *adminServer {
	t.Helper()
	reg := prometheus.NewRegistry()
	logs := &testsrv.SyncBuffer{}
	cfg.Registerer, cfg.Logger = reg, slog.New(slog.NewTextHandler(logs, nil))
	s := start(t, cfg, b)
	a := proxy.NewAdmin(s.srv, proxy.AdminConfig{Gatherer: reg})
	h := httptest.NewServer(a)
	t.Cleanup(func() { h.Close(); a.Close() })
	return &adminServer{server: s, url: h.URL, logs: logs}
}

// call sends an HTTP request (user "" sends no credentials) and returns
// the status, the headers and the body.
func (a *adminServer) call(t *testing.T, method, path, user, pass string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, a.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(strings.TrimPrefix(user, "-"), pass) // "-": an empty user name
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

// jsonOf decodes body into a value of type T.
func jsonOf[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("body %q is not the JSON expected: %v", body, err)
	}
	return v
}

// TestAdminLocksJSON: /locks pages the held keys as LOCKPROXY LOCKS does
// (the same entries), /locks/{key} reads one (404 when free), and POST
// /locks/{key}/release force-releases as LOCKPROXY RELEASE does: logged
// at warn, counted once per held key; other methods get 405.
func TestAdminLocksJSON(t *testing.T) {
	a := startAdmin(t, proxy.Config{}, memory.New(memory.Config{}))
	ctx := t.Context()
	c := redis.NewClient(&redis.Options{Addr: a.addr})
	defer c.Close()
	for _, k := range []string{"orders:1", "orders:2", "users/7"} {
		if err := c.SetArgs(ctx, k, "tok-"+k, redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c1 := redis.NewClient(&redis.Options{Addr: a.addr, DB: 1})
	defer c1.Close()
	if err := c1.Set(ctx, "other-db", "t", 0).Err(); err != nil {
		t.Fatal(err)
	}

	code, hdr, body := a.call(t, "GET", "/locks", "", "")
	if code != 200 || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /locks = %d %s %q", code, hdr.Get("Content-Type"), body)
	}
	page := jsonOf[proxy.LockPage](t, body)
	if page.Cursor != "0" || len(page.Locks) != 3 {
		t.Fatalf("GET /locks = %+v; want cursor 0 and 3 locks", page)
	}
	for _, l := range page.Locks {
		if l.Token == nil || *l.Token != "tok-"+l.Key || l.Fence == nil || l.TTLMillis <= 0 || l.TTLMillis > 60000 {
			t.Errorf("GET /locks entry %+v; want its token, a fence and a TTL up to 60000", l)
		}
	}
	if !strings.Contains(body, `"ttl_ms":`) || !strings.Contains(body, `"fence":`) || !strings.Contains(body, `"token":"tok-orders:1"`) {
		t.Errorf("GET /locks body %q lacks the key, token, fence and ttl_ms fields", body)
	}
	// The same entries as LOCKPROXY LOCKS.
	resp, err := c.Do(ctx, "LOCKPROXY", "LOCKS", "0").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if entries := resp[1].([]any); len(entries) != 3 {
		t.Errorf("LOCKPROXY LOCKS 0 = %v; want the 3 keys /locks lists", resp)
	}

	for _, tc := range []struct {
		query string
		keys  int
	}{{"?match=orders:*", 2}, {"?match=nothing*", 0}, {"?db=1", 1}, {"?count=1&match=users*", -1}} {
		code, _, body := a.call(t, "GET", "/locks"+tc.query, "", "")
		p := jsonOf[proxy.LockPage](t, body)
		if code != 200 || (tc.keys >= 0 && (len(p.Locks) != tc.keys || p.Cursor != "0")) {
			t.Errorf("GET /locks%s = %d %q; want %d locks", tc.query, code, body, tc.keys)
		}
	}
	for _, tc := range []struct{ query, want string }{
		{"?count=x", "ERR value is not an integer or out of range"},
		{"?db=99", "db: want a database number from 0 to 15"},
		{"?cursor=nope", "ERR invalid cursor"},
	} {
		code, _, body := a.call(t, "GET", "/locks"+tc.query, "", "")
		if e := jsonOf[map[string]string](t, body); code != 400 || !strings.HasPrefix(e["error"], tc.want) {
			t.Errorf("GET /locks%s = %d %q; want 400 with %q", tc.query, code, body, tc.want)
		}
	}

	code, _, body = a.call(t, "GET", "/locks/"+url.PathEscape("users/7"), "", "")
	if l := jsonOf[proxy.Lock](t, body); code != 200 || l.Key != "users/7" || l.Token == nil || *l.Token != "tok-users/7" {
		t.Errorf("GET /locks/users%%2F7 = %d %q; want the lock", code, body)
	}
	code, _, body = a.call(t, "GET", "/locks/free", "", "")
	if e := jsonOf[map[string]string](t, body); code != 404 || e["key"] != "free" || e["error"] == "" {
		t.Errorf("GET /locks/free = %d %q; want 404 naming the key", code, body)
	}

	for _, m := range []string{"GET", "PUT", "DELETE"} {
		code, hdr, body := a.call(t, m, "/locks/orders:1/release", "", "")
		if code != 405 || hdr.Get("Allow") != "POST" || !strings.Contains(body, `"error"`) {
			t.Errorf("%s /locks/orders:1/release = %d Allow %q %q; want 405, Allow: POST", m, code, hdr.Get("Allow"), body)
		}
	}
	if code, _, _ := a.call(t, "POST", "/locks", "", ""); code != 405 {
		t.Errorf("POST /locks = %d; want 405", code)
	}
	for i, want := range []bool{true, false} {
		code, _, body := a.call(t, "POST", "/locks/orders:1/release", "", "")
		if r := jsonOf[map[string]any](t, body); code != 200 || r["released"] != want || r["key"] != "orders:1" {
			t.Errorf("release #%d = %d %q; want released %v", i+1, code, body, want)
		}
	}
	if n, err := c.Exists(ctx, "orders:1").Result(); err != nil || n != 0 {
		t.Errorf("EXISTS orders:1 after the release = %d, %v; want 0", n, err)
	}
	if n, err := c.Do(ctx, "LOCKPROXY", "RELEASE", "orders:2").Int(); err != nil || n != 1 {
		t.Errorf("LOCKPROXY RELEASE orders:2 = %d, %v; want 1", n, err)
	}
	_, _, metrics := a.call(t, "GET", "/metrics", "", "")
	if !strings.Contains(metrics, "lockproxy_force_releases_total 2\n") {
		t.Errorf("/metrics after two releases of held keys (HTTP, RESP) and one of a free key lacks lockproxy_force_releases_total 2")
	}
	logs := a.logs.String()
	for _, want := range []string{
		`level=WARN msg="lock force-released" key=orders:1 db=0 held=true user=default client=127.0.0.1:`,
		`level=WARN msg="lock force-released" key=orders:2 db=0 held=true user=default client=127.0.0.1:`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}

	// A browser's cross-origin POST is refused; the page's own form
	// (same origin) is sent back to the page.
	if code, _, _ := a.call(t, "POST", "/locks/users%2F7/release", "", "", "Sec-Fetch-Site", "cross-site"); code != 403 {
		t.Errorf("cross-site POST release = %d; want 403", code)
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", a.url+"/locks/users%2F7/release",
		strings.NewReader(url.Values{"back": {"/?match=users*"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	r, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 303 || r.Header.Get("Location") != "/?match=users*" {
		t.Errorf("the page's release form = %d to %q; want 303 back to the page", r.StatusCode, r.Header.Get("Location"))
	}
	if n, _ := c.Exists(ctx, "users/7").Result(); n != 0 {
		t.Errorf("users/7 still held after the page's release")
	}
}

// TestAdminCredentials: with requirepass or users, the locks and the page
// need HTTP Basic credentials RESP's AUTH accepts (401 otherwise), a
// release needs the admin permission (403 as RESP's NOPERM otherwise),
// and /metrics, /healthz, /readyz stay open.
func TestAdminCredentials(t *testing.T) {
	hash := func(p string) [sha256.Size]byte { return sha256.Sum256([]byte(p)) }
	users := []proxy.User{{Name: "ops", PasswordSHA256: hash("opspw"), Admin: true}, {Name: "app", PasswordSHA256: hash("apppw")}}
	a := startAdmin(t, proxy.Config{RequirePass: "defpw", Users: users}, memory.New(memory.Config{}))
	ctx := t.Context()
	c := redis.NewClient(&redis.Options{Addr: a.addr, Username: "app", Password: "apppw"})
	defer c.Close()
	for _, k := range []string{"k1", "k2", "k3"} {
		if err := c.SetArgs(ctx, k, "t", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
		if code, _, _ := a.call(t, "GET", p, "", ""); code != 200 {
			t.Errorf("GET %s without credentials = %d; want 200 (open)", p, code)
		}
	}
	for _, tc := range []struct{ method, path, user, pass string }{
		{"GET", "/locks", "", ""}, {"GET", "/locks/k1", "", ""}, {"POST", "/locks/k1/release", "", ""}, {"GET", "/", "", ""},
		{"GET", "/locks", "app", "wrong"}, {"GET", "/locks", "nobody", "apppw"}, {"GET", "/", "default", "apppw"},
	} {
		code, hdr, body := a.call(t, tc.method, tc.path, tc.user, tc.pass)
		if code != 401 || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Basic ") || !strings.Contains(body, `"error"`) {
			t.Errorf("%s %s as %q/%q = %d %q %q; want 401 with a Basic challenge", tc.method, tc.path, tc.user, tc.pass, code, hdr.Get("WWW-Authenticate"), body)
		}
	}
	for _, u := range [][2]string{{"app", "apppw"}, {"ops", "opspw"}, {"default", "defpw"}, {"-", "defpw"}} {
		if code, _, body := a.call(t, "GET", "/locks", u[0], u[1]); code != 200 || len(jsonOf[proxy.LockPage](t, body).Locks) != 3 {
			t.Errorf("GET /locks as %s = %d %q; want the 3 locks", u[0], code, body)
		}
	}
	code, _, body := a.call(t, "POST", "/locks/k1/release", "app", "apppw")
	if e := jsonOf[map[string]string](t, body); code != 403 || e["error"] != "NOPERM this user has no permissions to run the 'lockproxy|release' command" {
		t.Errorf("release as app (no admin) = %d %q; want 403 with RESP's NOPERM", code, body)
	}
	if err := c.Do(ctx, "LOCKPROXY", "RELEASE", "k1").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("LOCKPROXY RELEASE as app = %v; want NOPERM, as over HTTP", err)
	}
	if code, _, _ := a.call(t, "GET", "/locks/k1/release", "app", "apppw"); code != 405 {
		t.Errorf("GET release as app = %d; want 405", code)
	}
	_, _, page := a.call(t, "GET", "/", "app", "apppw")
	if !strings.Contains(page, "k1") || strings.Contains(page, "/locks/k1/") {
		t.Errorf("the page as app lists k1 = %v, offers its release = %v; want listed without a release button",
			strings.Contains(page, "k1"), strings.Contains(page, "/locks/k1/"))
	}
	if code, _, _ := a.call(t, "GET", "/locks/k1/confirm", "app", "apppw"); code != 403 {
		t.Errorf("GET /locks/k1/confirm as app = %d; want 403", code)
	}
	// The page's release is a link to a confirmation, whose form releases.
	_, _, page = a.call(t, "GET", "/", "ops", "opspw")
	if !strings.Contains(page, `href="/locks/k1/confirm?back=%2F&amp;db=0"`) || strings.Contains(page, `action="/locks/k1/release`) {
		t.Errorf("the page as ops (admin) has no confirmation link for k1, or a release form without one:\n%s", page)
	}
	code, _, confirm := a.call(t, "GET", "/locks/k1/confirm?db=0&back=%2F", "ops", "opspw")
	if code != 200 || !strings.Contains(confirm, `action="/locks/k1/release?db=0"`) || !strings.Contains(confirm, `<a href="/">Cancel</a>`) {
		t.Errorf("GET /locks/k1/confirm as ops = %d, want a release form and a way back:\n%s", code, confirm)
	}
	for _, u := range [][2]string{{"ops", "opspw"}, {"default", "defpw"}} {
		key := map[string]string{"ops": "k1", "default": "k2"}[u[0]]
		code, _, body := a.call(t, "POST", "/locks/"+key+"/release", u[0], u[1])
		if r := jsonOf[map[string]any](t, body); code != 200 || r["released"] != true {
			t.Errorf("release of %s as %s = %d %q; want released", key, u[0], code, body)
		}
	}
	if !strings.Contains(a.logs.String(), `key=k1 db=0 held=true user=ops client=127.0.0.1:`) {
		t.Errorf("log lacks the release by ops:\n%s", a.logs.String())
	}

	// Named users without requirepass disable the default user, over HTTP
	// as over RESP.
	b := startAdmin(t, proxy.Config{Users: users}, memory.New(memory.Config{}))
	if code, _, _ := b.call(t, "GET", "/locks", "default", "anything"); code != 401 {
		t.Errorf("GET /locks as default with users and no requirepass = %d; want 401", code)
	}
	if code, _, _ := b.call(t, "GET", "/locks", "ops", "opspw"); code != 200 {
		t.Errorf("GET /locks as ops = %d; want 200", code)
	}
}

// TestAdminPage: the page names the mode, the held keys (searchable), the
// most contended key and the recent TRYAGAIN replies.
func TestAdminPage(t *testing.T) {
	hb := &hookBackend{Backend: memory.New(memory.Config{}), hook: func(ctx context.Context, key string) error {
		if key == "stuck" {
			return context.DeadlineExceeded // as a backend that could not decide in time
		}
		return nil
	}}
	a := startAdmin(t, proxy.Config{BackendName: "memory"}, hb)
	ctx := t.Context()
	c := redis.NewClient(&redis.Options{Addr: a.addr})
	defer c.Close()
	for _, k := range []string{"jobs:nightly", "jobs:hourly", "cache:warm"} {
		if err := c.SetArgs(ctx, k, "t", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if err := c.SetArgs(ctx, "jobs:nightly", "u", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); err != redis.Nil {
			t.Fatalf("SET jobs:nightly NX again = %v; want nil", err)
		}
	}
	if err := c.SetArgs(ctx, "stuck", "u", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
		t.Fatalf("SET stuck = %v; want TRYAGAIN", err)
	}
	code, hdr, page := a.call(t, "GET", "/", "", "")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %s", code, hdr.Get("Content-Type"))
	}
	for _, want := range []string{
		`<meta name="viewport"`, "mode <b>memory</b>", "jobs:hourly", "cache:warm",
		`<td class="key"><code>jobs:nightly</code></td><td class="n">0</td><td class="n">3</td>`, // contended
		"TRYAGAIN set timed out after",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script") || strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Errorf("the page loads a script or an external asset")
	}
	_, _, found := a.call(t, "GET", "/?match=jobs:*", "", "")
	if !strings.Contains(found, "jobs:hourly") || strings.Contains(found, "<code>cache:warm</code>") {
		t.Errorf("the page searched for jobs:* does not list jobs:hourly alone")
	}
	if code, _, _ := a.call(t, "GET", "/nothing-here", "", ""); code != 404 {
		t.Errorf("GET /nothing-here = %d; want 404", code)
	}
}
