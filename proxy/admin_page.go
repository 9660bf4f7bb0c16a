package proxy

import (
	"context"
	_ "embed"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// The status page at / (docs/operations.md): server-rendered from the
// Server's own state, the backend's metrics read through the Gatherer (as
// /metrics serves them), the lock listing (listLocks) and opsView. No
// script, no external asset: it works offline and without a build step.

//go:embed admin_page.html
var pageSource string

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"ms":   func(d time.Duration) string { return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 2, 64) },
	"ago":  func(t time.Time) string { return time.Since(t).Round(time.Second).String() },
	"hhmm": func(t time.Time) string { return t.UTC().Format("15:04:05") },
	"ttl":  func(ms int64) string { return humanDuration(time.Duration(ms) * time.Millisecond) },
	"held": heldFor,
	"sortLink": func(p *statusPage, by, label string) sortLink {
		return sortLink{On: p.Sort == by, URL: p.SortURL[by], Label: label}
	},
	"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"cut": func(s string, n int) string {
		if len(s) > n {
			return s[:n] + "…"
		}
		return s
	},
	"until": func(ms *int64) string { return time.UnixMilli(*ms).UTC().Format("15:04:05.000") },
	"confirmURL": func(l Lock, db int, back string) string {
		return "/locks/" + url.PathEscape(l.Key) + "/confirm?" + url.Values{"db": {strconv.Itoa(db)}, "back": {back}}.Encode()
	},
}).Parse(pageSource))

// pageCSP is the pages' Content-Security-Policy: no script, inline style,
// forms posted to this origin only, never framed.
const pageCSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'"

// sortLink is a column header's link to the page sorted by it.
type sortLink struct {
	On         bool
	URL, Label string
}

// pageLocks bounds the locks the page lists at once (a "more" link pages on).
const pageLocks = 100

// statusPage is what the page shows.
type statusPage struct {
	Version, Mode string
	AsOf          time.Time // when the page was made
	Uptime        time.Duration
	Ready         bool
	NotReady      string
	Held          string // "" when the backend cannot count
	Acquired      int64
	Contended     int64
	Failed        int64
	Clients       int

	Quorum    *quorumPanel
	Postgres  *postgresPanel
	Migration *migrationPanel

	Match, Cursor, Next string            // the search, this page's cursor, the next one ("" at the end)
	Sort                string            // the locks' order (lockSorts)
	SortURL             map[string]string // each order's link
	DB                  int
	Locks               []Lock
	LocksError          string
	CanRelease          bool
	Back                string // the page's own URL, for the release forms
	Contention          []contended
	Tryagain            []tryagainReply
}

type quorumPanel struct {
	Majority float64
	Nodes    []nodeRow
}

type nodeRow struct {
	Addr        string
	Up          bool
	Check       time.Duration // the last health check's round trip
	Reply       time.Duration // mean reply time since start; 0: none yet
	Quarantined bool
	Remaining   string // time left in quarantine; "not read yet" before a first check
	Warnings    int
	Failures    float64
}

type postgresPanel struct {
	Strategy               string
	Advisory               bool // holder sessions exist (advisory strategy)
	HoldersUp, Holders     float64
	SessionsLost, Leases   float64
	PoolAcquired, PoolIdle float64
	PoolTotal              float64
	RestartWait            time.Duration
	AdvisoryLocks, Limit   float64 // advisory locks held, and the most this instance holds
}

type migrationPanel struct {
	Up        bool
	Clients   float64 // -1 before the first read
	SinceLast string  // since a direct client's last command; "" when none seen
	Errors    float64
	Chart     chart
}

// chart is an inline SVG line of samples over the last hour.
type chart struct {
	W, H   int
	Points string       // the polyline's points
	Dots   [][2]float64 // the samples themselves
	Max    float64
}

func (a *Admin) servePage(w http.ResponseWriter, r *http.Request, user string) {
	db, ok := dbParam(w, r)
	if !ok {
		return
	}
	ctx, cancel := a.commandCtx(r)
	defer cancel()
	p := a.status(ctx, r, db)
	p.CanRelease = a.s.admin(user)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", pageCSP)
	if err := pageTemplate.Execute(w, &p); err != nil {
		a.s.log.Error("status page", "err", err)
	}
}

// status collects the page's state.
func (a *Admin) status(ctx context.Context, r *http.Request, db int) statusPage {
	s := a.s
	p := statusPage{Version: a.cfg.Version, Mode: s.cfg.BackendName, AsOf: time.Now(), Uptime: time.Since(s.started).Round(time.Second),
		Ready: true, Clients: s.clientCount(), DB: db, Back: r.URL.RequestURI(),
		Contention: s.ops.topContended(), Tryagain: s.ops.recentTryagains()}
	if err := checkReady(ctx, s.b, time.Second); err != nil {
		p.Ready, p.NotReady = false, err.Error()
	}
	switch c, ok := s.b.(HeldLocksCounter); {
	case s.metrics != nil && s.metrics.locks.held != nil:
		p.Held = strconv.FormatInt(s.metrics.locks.held.get(), 10)
	case ok:
		p.Held = strconv.FormatInt(c.HeldLocks(), 10)
	}
	if m := s.metrics; m != nil {
		p.Acquired, p.Contended, p.Failed = m.locks.counts[outcomeAcquired].Load(), m.locks.counts[outcomeContended].Load(), m.locks.counts[outcomeFailed].Load()
	}
	g := gather(a.cfg.Gatherer)
	p.Quorum = quorumStatus(g)
	p.Postgres = postgresStatus(g, s.b)
	p.Migration = a.migrationStatus(g)
	if p.Migration != nil {
		p.Mode += ", migrating"
	}
	a.pageLocks(ctx, r, &p)
	return p
}

// pageLocks lists up to pageLocks held locks matching the search, from
// the request's cursor on, over as many SCAN pages as that takes (at most
// 20).
func (a *Admin) pageLocks(ctx context.Context, r *http.Request, p *statusPage) {
	q := r.URL.Query()
	p.Match, p.Cursor, p.Sort = q.Get("match"), orDefault(q.Get("cursor"), "0"), sortParam(r)
	p.SortURL = map[string]string{}
	for _, by := range lockSorts {
		p.SortURL[by] = p.pageURL(by, p.Cursor)
	}
	defer func() { sortLocks(p.Locks, p.Sort) }()
	cursor := p.Cursor
	p.Locks = []Lock{}
	for range 20 {
		args := [][]byte{[]byte(cursor), []byte("COUNT"), []byte("200")}
		if p.Match != "" {
			args = append(args, []byte("MATCH"), []byte(p.Match))
		}
		page, err := listLocks(ctx, a.s.b, p.DB, args)
		if err != nil {
			p.LocksError = string(a.s.errorValue("lockproxy", err, "admin_client", r.RemoteAddr).Str)
			return
		}
		p.Locks = append(p.Locks, page.Locks...)
		cursor = page.Cursor
		if cursor == "0" || len(p.Locks) >= pageLocks {
			break
		}
	}
	if cursor != "0" {
		p.Next = p.pageURL(p.Sort, cursor)
	}
	a.pageExactKey(ctx, p)
}

// pageExactKey adds, for a search that names one key (no pattern), that
// key's LOCKPROXY LOCK when the listing lacks it: a lock held outside
// lockproxy's own table (a PostgreSQL session's from SQL, a legacy Redis's
// during a migration) is found so, with who holds it.
func (a *Admin) pageExactKey(ctx context.Context, p *statusPage) {
	if p.Match == "" || p.LocksError != "" || p.Cursor != "0" || strings.ContainsAny(p.Match, `*?[\`) ||
		slices.ContainsFunc(p.Locks, func(l Lock) bool { return l.Key == p.Match }) {
		return
	}
	if l, held, err := readLock(ctx, a.s.b, p.DB, []byte(p.Match)); err == nil && held {
		p.Locks = append(p.Locks, l)
	}
}

func quorumStatus(g gathered) *quorumPanel {
	ups := g.series("lockproxy_quorum_node_up")
	if len(ups) == 0 {
		return nil
	}
	q := &quorumPanel{Majority: g.value("lockproxy_quorum_majority", "")}
	for _, up := range ups {
		n := up.labels["node"]
		row := nodeRow{Addr: n, Up: up.v == 1,
			Check:       seconds(g.value("lockproxy_quorum_node_check_seconds", n)),
			Quarantined: g.value("lockproxy_quorum_node_quarantined", n) == 1,
			Warnings:    int(g.value("lockproxy_quorum_node_safety_warnings", n)),
			Failures:    g.value("lockproxy_quorum_node_failures_total", n)}
		if h := g.histogram("lockproxy_quorum_node_reply_seconds", n); h.count > 0 {
			row.Reply = seconds(h.sum / float64(h.count))
		}
		switch left := g.value("lockproxy_quorum_node_quarantine_remaining_seconds", n); {
		case math.IsInf(left, 1):
			row.Remaining = "not read yet"
		case left > 0:
			row.Remaining = seconds(left).Round(time.Second).String()
		}
		q.Nodes = append(q.Nodes, row)
	}
	return q
}

func postgresStatus(g gathered, b backend.Backend) *postgresPanel {
	if len(g.series("lockproxy_postgres_pool_connections")) == 0 {
		return nil
	}
	p := &postgresPanel{
		PoolAcquired: g.labelled("lockproxy_postgres_pool_connections", "state", "acquired"),
		PoolIdle:     g.labelled("lockproxy_postgres_pool_connections", "state", "idle"),
		PoolTotal:    g.labelled("lockproxy_postgres_pool_connections", "state", "total"),
	}
	if r, ok := b.(InfoReporter); ok {
		for _, l := range r.InfoLines() {
			if v, ok := strings.CutPrefix(l, "lockproxy_postgres_strategy:"); ok {
				p.Strategy = v
			}
		}
	}
	if len(g.series("lockproxy_postgres_holders")) > 0 {
		p.Advisory = true
		p.Holders, p.HoldersUp = g.value("lockproxy_postgres_holders", ""), g.value("lockproxy_postgres_holders_up", "")
		p.SessionsLost, p.Leases = g.value("lockproxy_postgres_holder_sessions_lost_total", ""), g.value("lockproxy_postgres_leases_held", "")
		p.RestartWait = seconds(g.value("lockproxy_postgres_restart_wait_seconds", "")).Round(time.Second)
		p.AdvisoryLocks, p.Limit = g.value("lockproxy_postgres_advisory_locks", ""), g.value("lockproxy_postgres_advisory_locks_limit", "")
	}
	return p
}

func (a *Admin) migrationStatus(g gathered) *migrationPanel {
	if len(g.series("lockproxy_migration_legacy_clients")) == 0 {
		return nil
	}
	m := &migrationPanel{Up: g.value("lockproxy_migration_legacy_up", "") == 1,
		Clients: g.value("lockproxy_migration_legacy_clients", ""),
		Errors:  g.value("lockproxy_migration_legacy_errors_total", "")}
	if last := g.value("lockproxy_migration_legacy_last_command_timestamp_seconds", ""); last > 0 {
		m.SinceLast = strconv.FormatInt(max(0, time.Now().Unix()-int64(last)), 10)
	}
	now := time.Now()
	samples := a.legacy.samples()
	if m.Clients >= 0 {
		samples = append(samples, sample{At: now, V: m.Clients})
	}
	m.Chart = lineChart(samples, now, time.Hour, 320, 80)
	return m
}

// lineChart places samples of the span up to now on a w×h chart; the
// vertical scale goes from 0 to the largest sample (at least 1).
func lineChart(samples []sample, now time.Time, span time.Duration, w, h int) chart {
	c := chart{W: w, H: h, Max: 1}
	for _, s := range samples {
		c.Max = max(c.Max, s.V)
	}
	var b strings.Builder
	for _, s := range samples {
		age := now.Sub(s.At)
		if age > span || s.V < 0 {
			continue
		}
		x := float64(w) * (1 - float64(age)/float64(span))
		y := float64(h-4) * (1 - s.V/c.Max)
		x, y = math.Round(x*10)/10, math.Round((y+2)*10)/10
		fmt.Fprintf(&b, "%g,%g ", x, y)
		c.Dots = append(c.Dots, [2]float64{x, y})
	}
	c.Points = strings.TrimSpace(b.String())
	return c
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// BuildVersion is the binary's module version and VCS revision, as the Go
// toolchain recorded them: a tagged version for go install, a pseudo-
// version with the revision for go build in a checkout, "(devel)" where
// neither was recorded (go run).
func BuildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(12, len(s.Value))]
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		v += " " + rev + dirty
	}
	return v
}
