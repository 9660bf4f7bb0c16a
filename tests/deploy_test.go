package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// The operator's files in deploy/: Prometheus alert rules and a Grafana
// dashboard over the metrics lockproxy exports. These tests read them as
// Prometheus and Grafana would, and check every expression against the
// /metrics of a running lockproxy in each mode, so neither can name a
// series that does not exist.

const (
	deployAlerts    = "deploy/prometheus/alerts.yml"
	deployDashboard = "deploy/grafana/lockproxy.json"
)

// alertFile is a Prometheus rule file.
type alertFile struct {
	Groups []struct {
		Name     string      `yaml:"name"`
		Interval string      `yaml:"interval"`
		Rules    []alertRule `yaml:"rules"`
	} `yaml:"groups"`
}

// alertRule is one rule of a group, with every field Prometheus knows, so
// that decoding with KnownFields refuses a misspelt one.
type alertRule struct {
	Alert         string            `yaml:"alert"`
	Record        string            `yaml:"record"`
	Expr          string            `yaml:"expr"`
	For           string            `yaml:"for"`
	KeepFiringFor string            `yaml:"keep_firing_for"`
	Labels        map[string]string `yaml:"labels"`
	Annotations   map[string]string `yaml:"annotations"`
}

// dashboard is the part of a Grafana dashboard the checks read.
type dashboard struct {
	Title      string      `json:"title"`
	UID        string      `json:"uid"`
	Panels     []dashPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *dashDatasource `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type dashPanel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource *dashDatasource `json:"datasource"`
	Panels     []dashPanel     `json:"panels"` // a collapsed row's
	Targets    []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

type dashDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// deployExpr is one PromQL expression of the deploy files and where it is.
type deployExpr struct {
	Where, Expr string
}

// deployFile reads a file of the repository.
func deployFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadAlerts decodes alerts.yml; unknown fields are errors.
func loadAlerts(t *testing.T) alertFile {
	t.Helper()
	var f alertFile
	dec := yaml.NewDecoder(bytes.NewReader(deployFile(t, deployAlerts)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", deployAlerts, err)
	}
	return f
}

// loadDashboard decodes the dashboard.
func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(deployFile(t, deployDashboard), &d); err != nil {
		t.Fatalf("%s: %v", deployDashboard, err)
	}
	return d
}

// dashPanels returns every panel, those inside rows included.
func (d dashboard) dashPanels() []dashPanel {
	var out []dashPanel
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// grafanaLabelValues is a query variable's label_values(metric, label).
var grafanaLabelValues = regexp.MustCompile(`^label_values\(\s*([^,]+?)\s*,\s*[a-zA-Z_]+\s*\)$`)

// deployExprs returns every expression of the alert rules and the
// dashboard (its panels' targets and its query variables').
func deployExprs(t *testing.T) []deployExpr {
	t.Helper()
	var out []deployExpr
	for _, g := range loadAlerts(t).Groups {
		for _, r := range g.Rules {
			out = append(out, deployExpr{deployAlerts + " " + r.Alert, r.Expr})
		}
	}
	d := loadDashboard(t)
	for _, p := range d.dashPanels() {
		for _, tg := range p.Targets {
			out = append(out, deployExpr{fmt.Sprintf("%s panel %q %s", deployDashboard, p.Title, tg.RefID), tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil {
			json.Unmarshal(v.Query, &q.Query) // the older form: a plain string
		}
		if m := grafanaLabelValues.FindStringSubmatch(q.Query); m != nil {
			q.Query = m[1]
		}
		out = append(out, deployExpr{fmt.Sprintf("%s variable %s", deployDashboard, v.Name), q.Query})
	}
	return out
}

// deployRequiredAlerts are the situations the rules must cover (issue 29,
// docs/operations.md#alerts-and-dashboard).
var deployRequiredAlerts = []string{
	"LockproxyNotReady", "LockproxyTryagainRising", "LockproxyErrors", "LockproxySlowAcquisitions",
	"LockproxyNearClientLimit", "LockproxyQuorumNodeDown", "LockproxyQuorumMajorityAtRisk",
	"LockproxyQuorumNodeQuarantined", "LockproxyQuorumUnsafeNodeSettings", "LockproxyQuorumNodeFailures",
	"LockproxyPostgresSessionLost", "LockproxyPostgresRestartWait", "LockproxyPostgresHoldersDown",
	"LockproxyMigrationLegacyDown", "LockproxyMigrationUndoFailed", "LockproxyMigrationStalled",
}

// promRuleDuration is a rule's for: a Prometheus duration.
var promRuleDuration = regexp.MustCompile(`^(0|([0-9]+(ms|[smhdwy]))+)$`)

// TestDeployAlertRules: alerts.yml is a rule file Prometheus loads: groups
// of rules, each with alert, expr, for, a severity and a summary and
// description, the expressions well formed, every required alert present
// and no name twice.
func TestDeployAlertRules(t *testing.T) {
	t.Parallel()
	f := loadAlerts(t)
	if len(f.Groups) == 0 {
		t.Fatalf("%s: no groups", deployAlerts)
	}
	seen := map[string]bool{}
	for _, g := range f.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("%s: group %q has no name or no rules", deployAlerts, g.Name)
		}
		for i, r := range g.Rules {
			where := fmt.Sprintf("%s: group %s rule %d (%s)", deployAlerts, g.Name, i+1, r.Alert)
			switch {
			case r.Alert == "" || r.Record != "":
				t.Errorf("%s: want an alert, not a recording rule", where)
			case seen[r.Alert]:
				t.Errorf("%s: alert %s twice", where, r.Alert)
			}
			seen[r.Alert] = true
			if !promRuleDuration.MatchString(r.For) {
				t.Errorf("%s: for = %q; want a duration (0m for at once)", where, r.For)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: labels.severity = %q; want critical or warning", where, s)
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no annotations.%s", where, a)
				}
			}
			if _, err := parsePromQL(r.Expr); err != nil {
				t.Errorf("%s: expr %q: %v", where, r.Expr, err)
			}
		}
	}
	for _, a := range deployRequiredAlerts {
		if !seen[a] {
			t.Errorf("%s: no alert %s", deployAlerts, a)
		}
	}
}

// TestDeployDashboard: the dashboard imports into Grafana with the
// Prometheus data source chosen by its DS_PROMETHEUS variable, filters
// every query by the instance variable, and has the sections operators
// look for.
func TestDeployDashboard(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("%s: title %q, uid %q; want both", deployDashboard, d.Title, d.UID)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Datasource != nil && v.Datasource.UID != "${DS_PROMETHEUS}" {
			t.Errorf("%s: variable %s uses data source %q; want ${DS_PROMETHEUS}", deployDashboard, v.Name, v.Datasource.UID)
		}
	}
	if vars["DS_PROMETHEUS"] != "datasource" || vars["instance"] != "query" {
		t.Errorf("%s: variables %v; want DS_PROMETHEUS (datasource) and instance (query)", deployDashboard, vars)
	}
	ids := map[int]bool{}
	var rows []string
	for _, p := range d.dashPanels() {
		if ids[p.ID] {
			t.Errorf("%s: panel id %d twice", deployDashboard, p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			rows = append(rows, p.Title)
			continue
		}
		checkDashPanel(t, p)
	}
	for _, r := range []string{"Commands", "Acquire latency", "Locks", "Quorum nodes", "PostgreSQL", "Migration"} {
		if !slices.Contains(rows, r) {
			t.Errorf("%s: no row %q (rows %q)", deployDashboard, r, rows)
		}
	}
}

// checkDashPanel checks one panel: a title, the templated data source,
// targets with distinct refIds and expressions that parse, and every
// selector filtered by instance=~"$instance".
func checkDashPanel(t *testing.T, p dashPanel) {
	t.Helper()
	if p.Title == "" {
		t.Errorf("%s: panel %d has no title", deployDashboard, p.ID)
	}
	if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${DS_PROMETHEUS}" {
		t.Errorf("%s: panel %q data source %+v; want prometheus ${DS_PROMETHEUS}", deployDashboard, p.Title, p.Datasource)
	}
	if len(p.Targets) == 0 {
		t.Errorf("%s: panel %q has no query", deployDashboard, p.Title)
	}
	refs := map[string]bool{}
	for _, tg := range p.Targets {
		if tg.RefID == "" || refs[tg.RefID] {
			t.Errorf("%s: panel %q: refId %q empty or twice", deployDashboard, p.Title, tg.RefID)
		}
		refs[tg.RefID] = true
		sels, err := parsePromQL(tg.Expr)
		if err != nil {
			t.Errorf("%s: panel %q expr %q: %v", deployDashboard, p.Title, tg.Expr, err)
		}
		for _, s := range sels {
			if !slices.ContainsFunc(s.LabelMatchers, func(m *labels.Matcher) bool {
				return m.Name == "instance" && m.Type == labels.MatchRegexp && m.Value == "$instance"
			}) {
				t.Errorf("%s: panel %q: %s is not filtered by instance=~\"$instance\" in %q", deployDashboard, p.Title, s.Name, tg.Expr)
			}
		}
	}
}

// TestDeployMetricNames starts the real binary in each mode (memory,
// quorum over three redis-servers, postgres, migrating from a legacy
// Redis), drives a few lock commands through each, and checks that every
// selector of every expression in the deploy files names a series one of
// them exports, with labels and label values that exist.
func TestDeployMetricNames(t *testing.T) {
	t.Parallel()
	exprs := deployExprs(t)
	series := deployScrapeModes(t)
	for _, e := range exprs {
		sels, err := parsePromQL(e.Expr)
		if err != nil {
			t.Errorf("%s: expr %q: %v", e.Where, e.Expr, err)
			continue
		}
		if len(sels) == 0 {
			t.Errorf("%s: expr %q reads no metric", e.Where, e.Expr)
		}
		for _, s := range sels {
			if why := series.lacks(s); why != "" {
				t.Errorf("%s: expr %q: %s", e.Where, e.Expr, why)
			}
		}
	}
}

// deployModes are the lockproxy configurations whose /metrics together
// must hold every series the deploy files read.
func deployModes(t *testing.T) map[string][]string {
	t.Helper()
	nodes := []string{testsrv.StartRedis(t).Addr, testsrv.StartRedis(t).Addr, testsrv.StartRedis(t).Addr}
	return map[string][]string{
		"memory":    nil,
		"quorum":    {"--backend", "quorum", "--quorum-nodes", strings.Join(nodes, ",")},
		"postgres":  {"--backend", "postgres", "--postgres-dsn", testsrv.SharedPostgres(t).NewDatabase(t)},
		"migrating": {"--migrate-from", "redis://" + testsrv.StartRedis(t).Addr, "--migrate-timeout", "1s"},
	}
}

// deployScrapeModes runs each mode, drives lock traffic through it (the
// per-node reply histograms exist once a node has replied) and returns the
// union of their series.
func deployScrapeModes(t *testing.T) expoSeries {
	t.Helper()
	bin := testsrv.BuildLockproxy(t)
	all := expoSeries{}
	for mode, args := range deployModes(t) {
		lp := testsrv.StartBinary(t, bin, args...)
		deployTraffic(t, mode, lp)
		got, err := parseExposition(awaitMetrics(t, lp.Admin, "lockproxy_ready 1"))
		if err != nil {
			t.Fatalf("%s: /metrics: %v", mode, err)
		}
		for name, labels := range got {
			all[name] = append(all[name], labels...)
		}
	}
	return all
}

// deployTraffic acquires, contends for, reads and releases a lock through
// lp, by SET NX and by the release script, EVALSHA included.
func deployTraffic(t *testing.T, mode string, lp *testsrv.Binary) {
	t.Helper()
	ctx := t.Context()
	c := redis.NewClient(&redis.Options{Addr: lp.Addr, MaxRetries: -1})
	defer c.Close()
	release := redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, err := c.SetNX(ctx, "deploy:k", "tok", time.Minute).Result()
		if err == nil && ok {
			break
		}
		if time.Now().After(deadline) { // TRYAGAIN until the backend is ready
			t.Fatalf("%s: SET NX = %v, %v\n%s", mode, ok, err, lp.Logs())
		}
		time.Sleep(50 * time.Millisecond) // polling for readiness
	}
	c.SetNX(ctx, "deploy:k", "other", time.Minute)
	c.Get(ctx, "deploy:k")
	if err := release.Run(ctx, c, []string{"deploy:k"}, "tok").Err(); err != nil { // EVALSHA, then EVAL
		t.Fatalf("%s: release script: %v", mode, err)
	}
	c.Del(ctx, "deploy:k")
}

// deployTargetLabels are the labels Prometheus adds to every series it
// scrapes: a selector may match on them.
var deployTargetLabels = map[string]bool{"instance": true, "job": true}

// lacks says why no scraped series matches s's metric and label names and
// values, or "" when one does. Values with a Grafana variable are not
// compared; an alternation of plain names (a|b|c) needs each of them.
func (all expoSeries) lacks(s *parser.VectorSelector) string {
	samples, ok := all[s.Name]
	if !ok {
		return fmt.Sprintf("metric %s is in no mode's /metrics", s.Name)
	}
	for _, m := range promLabelMatchers(s) {
		if deployTargetLabels[m.Name] || strings.Contains(m.Value, "$") {
			continue
		}
		var values []string
		for _, l := range samples {
			if v, ok := l[m.Name]; ok {
				values = append(values, v)
			}
		}
		if len(values) == 0 {
			return fmt.Sprintf("metric %s has no label %s", s.Name, m.Name)
		}
		var want []string
		switch {
		case m.Type == labels.MatchEqual:
			want = []string{m.Value}
		case m.Type == labels.MatchRegexp && regexp.MustCompile(`^[a-z0-9_]+(\|[a-z0-9_]+)*$`).MatchString(m.Value):
			want = strings.Split(m.Value, "|")
		}
		for _, w := range want {
			if !slices.Contains(values, w) {
				return fmt.Sprintf("metric %s has no series with %s=%q (values %q)", s.Name, m.Name, w, slices.Compact(slices.Sorted(slices.Values(values))))
			}
		}
	}
	return ""
}
