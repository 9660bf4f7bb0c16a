package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/keycmd"
)

// AdminConfig configures the admin port's handler (NewAdmin). Zero values
// mean the documented defaults.
type AdminConfig struct {
	// Gatherer is what /metrics serves and the status page reads (the
	// nodes, PostgreSQL, the migration). required
	Gatherer prometheus.Gatherer
	// Version is shown on the status page. default: the binary's build
	// information (module version and VCS revision)
	Version string
	// SampleInterval is how often the migration's legacy clients are
	// sampled for the status page's chart of the last hour. default: 30s
	SampleInterval time.Duration
}

// Admin is the admin port's handler: /metrics, /healthz and /readyz
// (AdminHandler's, always open), the locks as JSON (/locks,
// /locks/{key}, POST /locks/{key}/release), the status page at / and its
// release confirmation (GET /locks/{key}/confirm, admin_view.go).
//
// When the Server needs no AUTH (no requirepass, no users), every route
// is open, as its RESP port is. Otherwise the locks and the page need HTTP
// Basic credentials of a user RESP's AUTH accepts (user "default" or an
// empty name with requirepass), and a release needs a user allowed
// LOCKPROXY RELEASE (the admin permission). A cross-origin POST from a
// browser is refused (http.CrossOriginProtection), so a page elsewhere
// cannot release locks through an operator's browser.
//
// An Admin is safe for concurrent use. It samples the migration's legacy
// clients on a goroutine of its own until Close.
type Admin struct {
	s      *Server
	cfg    AdminConfig
	mux    *http.ServeMux
	legacy *sampler
}

// NewAdmin returns the admin handler of s. Close it when done.
func NewAdmin(s *Server, cfg AdminConfig) *Admin {
	if cfg.Version == "" {
		cfg.Version = BuildVersion()
	}
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = 30 * time.Second
	}
	a := &Admin{s: s, cfg: cfg, mux: http.NewServeMux()}
	a.legacy = startSampler(cfg.SampleInterval, time.Hour, func() (float64, bool) {
		return gatherValue(cfg.Gatherer, "lockproxy_migration_legacy_clients")
	})
	base := AdminHandler(cfg.Gatherer, s.b)
	for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
		a.mux.Handle(p, base)
	}
	a.mux.HandleFunc("/locks", a.viewer(a.serveLocks))
	a.mux.HandleFunc("/locks/{key}", a.viewer(a.serveLock))
	a.mux.Handle("/locks/{key}/release", http.NewCrossOriginProtection().Handler(a.viewer(a.serveRelease)))
	a.mux.HandleFunc("GET /locks/{key}/confirm", a.viewer(a.serveConfirm))
	a.mux.HandleFunc("GET /{$}", a.viewer(a.servePage))
	return a
}

// ServeHTTP implements http.Handler.
func (a *Admin) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// Close stops the sampler and waits for it.
func (a *Admin) Close() { a.legacy.close() }

// viewerHandler serves a request of an authenticated user ("default" for
// the default user).
type viewerHandler func(w http.ResponseWriter, r *http.Request, user string)

// viewer authenticates the request before h: 401 with a Basic challenge
// when credentials are needed and missing or wrong.
func (a *Admin) viewer(h viewerHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !a.s.authRequired() {
			h(w, r, "default")
			return
		}
		if user, pass, ok := r.BasicAuth(); ok {
			if user == "" {
				user = "default"
			}
			if a.s.authenticate(user, pass) {
				h(w, r, user)
				return
			}
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="lockproxy", charset="UTF-8"`)
		writeError(w, http.StatusUnauthorized, "authentication required: HTTP Basic with a lockproxy user and password (user default: requirepass)")
	}
}

// serveLocks is GET /locks?cursor=&match=&count=&db=: one page of
// LOCKPROXY LOCKS.
func (a *Admin) serveLocks(w http.ResponseWriter, r *http.Request, _ string) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	db, ok := dbParam(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	args := [][]byte{[]byte(orDefault(q.Get("cursor"), "0"))}
	if m := q.Get("match"); m != "" {
		args = append(args, []byte("MATCH"), []byte(m))
	}
	if c := q.Get("count"); c != "" {
		args = append(args, []byte("COUNT"), []byte(c))
	}
	ctx, cancel := a.commandCtx(r)
	defer cancel()
	page, err := listLocks(ctx, a.s.b, db, args)
	if err != nil {
		a.writeBackendError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// keyRoute begins a request of a /locks/{key} route served by method: the
// database and the key; ok is false once it has answered (another
// method, a bad db).
func keyRoute(w http.ResponseWriter, r *http.Request, method string) (db int, key string, ok bool) {
	if !allow(w, r, method) {
		return 0, "", false
	}
	if db, ok = dbParam(w, r); !ok {
		return 0, "", false
	}
	return db, r.PathValue("key"), true
}

// serveLock is GET /locks/{key}?db=: LOCKPROXY LOCK, 404 when free.
func (a *Admin) serveLock(w http.ResponseWriter, r *http.Request, _ string) {
	db, key, ok := keyRoute(w, r, http.MethodGet)
	if !ok {
		return
	}
	ctx, cancel := a.commandCtx(r)
	defer cancel()
	l, held, err := readLock(ctx, a.s.b, db, []byte(key))
	switch {
	case err != nil:
		a.writeBackendError(w, r, err)
	case !held:
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "not held: the key is free", "key": key})
	default:
		writeJSON(w, http.StatusOK, l)
	}
}

// serveRelease is POST /locks/{key}/release?db=: LOCKPROXY RELEASE. From
// the status page's form (a field back naming the page), it redirects
// back there.
func (a *Admin) serveRelease(w http.ResponseWriter, r *http.Request, user string) {
	db, key, ok := keyRoute(w, r, http.MethodPost)
	if !ok {
		return
	}
	if !a.s.admin(user) {
		writeError(w, http.StatusForbidden, backend.ErrNoPerm("lockproxy|release"))
		return
	}
	ctx, cancel := a.commandCtx(r)
	defer cancel()
	held, err := a.s.forceRelease(ctx, a.s.b, db, []byte(key), "user", user, "client", r.RemoteAddr, "via", "http")
	if err != nil {
		a.writeBackendError(w, r, err)
		return
	}
	if back := r.PostFormValue("back"); back != "" && localPath(back) == back {
		http.Redirect(w, r, back, http.StatusSeeOther)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": key, "db": db, "released": held})
}

// commandCtx bounds an admin request's backend work as a command's.
func (a *Admin) commandCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), a.s.cfg.CommandTimeout)
}

// writeBackendError answers a backend failure with its reply text, as a
// RESP client would read it: 503 for TRYAGAIN, 500 for an internal error,
// 400 for the rest (a bad option, in Redis's words).
func (a *Admin) writeBackendError(w http.ResponseWriter, r *http.Request, err error) {
	v := a.s.errorValue("lockproxy", err, "admin_client", r.RemoteAddr)
	code := http.StatusBadRequest
	switch {
	case isTryagain(v.Str):
		code = http.StatusServiceUnavailable
	case string(v.Str) == backend.MsgInternal:
		code = http.StatusInternalServerError
	}
	writeError(w, code, string(v.Str))
}

// allow answers 405 unless r's method is method.
func allow(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method || (method == http.MethodGet && r.Method == http.MethodHead) {
		return true
	}
	w.Header().Set("Allow", method)
	writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed: use "+method)
	return false
}

// dbParam is the request's db (0 when absent), or false after a 400.
func dbParam(w http.ResponseWriter, r *http.Request) (int, bool) {
	s := r.FormValue("db")
	if s == "" {
		return 0, true
	}
	db, err := strconv.Atoi(s)
	if err != nil || db < 0 || db >= keycmd.Databases {
		writeError(w, http.StatusBadRequest, "db: want a database number from 0 to "+strconv.Itoa(keycmd.Databases-1)+", got "+strconv.Quote(s))
		return 0, false
	}
	return db, true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// orDefault returns s, or def when s is empty.
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
