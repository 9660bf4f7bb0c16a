package tests

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// The deploy checks (deploy_test.go) read PromQL with Prometheus's own
// parser and /metrics with Prometheus's own text-format parser, so an
// expression they accept is one Prometheus loads.

// promParser parses PromQL as a Prometheus server without feature flags
// does. It is safe for concurrent use.
var promParser = parser.NewParser(parser.Options{})

// promGrafanaVars are the Grafana interval variables a dashboard query may
// use where PromQL takes a duration; the check reads them as 5m.
var promGrafanaVars = regexp.MustCompile(`\$(__rate_interval|__interval|__range)\b|\$\{(__rate_interval|__interval|__range)\}`)

// parsePromQL parses expr and returns its vector selectors, those inside
// range selectors and subqueries included.
func parsePromQL(expr string) ([]*parser.VectorSelector, error) {
	e, err := promParser.ParseExpr(promGrafanaVars.ReplaceAllString(expr, "5m"))
	if err != nil {
		return nil, err
	}
	var sels []*parser.VectorSelector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			sels = append(sels, vs)
		}
		return nil
	})
	return sels, nil
}

// promLabelMatchers returns vs's label matchers without the __name__ one
// the parser adds for the metric name.
func promLabelMatchers(vs *parser.VectorSelector) []*labels.Matcher {
	var out []*labels.Matcher
	for _, m := range vs.LabelMatchers {
		if m.Name != model.MetricNameLabel {
			out = append(out, m)
		}
	}
	return out
}

// TestDeployPromQLCheck: parsePromQL refuses what a slip of the hand
// writes in a rule or a panel, and finds every selector of a valid
// expression, under range selectors and subqueries and with a Grafana
// interval variable.
func TestDeployPromQLCheck(t *testing.T) {
	t.Parallel()
	good := `histogram_quantile(0.99, sum by (instance, le) (rate(a_bucket{command=~"set|eval",x!="y"}[$__rate_interval])))
		> 0.05 and on (instance) b or (max_over_time(c[1h:5m]) unless time() - d{e="f"} < 3600)`
	sels, err := parsePromQL(good)
	if err != nil {
		t.Fatalf("parsePromQL(%q) = %v", good, err)
	}
	var got []string
	for _, s := range sels {
		got = append(got, fmt.Sprintf("%s%v", s.Name, promLabelMatchers(s)))
	}
	if want := `a_bucket[command=~"set|eval" x!="y"] b[] c[] d[e="f"]`; strings.Join(got, " ") != want {
		t.Errorf("selectors = %q; want %q", strings.Join(got, " "), want)
	}
	for name, bad := range map[string]string{
		"unclosed paren":      `sum(rate(a[5m])`,
		"unknown function":    `histogram_quantille(0.99, a)`,
		"unquoted value":      `a{b=c}`,
		"grafana var outside": `a > $threshold`,
	} {
		if _, err := parsePromQL(bad); err == nil {
			t.Errorf("%s: parsePromQL(%q) accepted it", name, bad)
		}
	}
}

// TestDeployMetricCheck: a selector naming a metric, a label or a label
// value that no /metrics page has is reported, and one that exists is not.
func TestDeployMetricCheck(t *testing.T) {
	t.Parallel()
	series, err := parseExposition(`# HELP lockproxy_commands_total Commands.
# TYPE lockproxy_commands_total counter
lockproxy_commands_total{command="set",outcome="ok"} 3
lockproxy_commands_total{command="eval",outcome="ok"} 1
`)
	if err != nil {
		t.Fatal(err)
	}
	for expr, want := range map[string]string{
		`rate(lockproxy_commands_total{instance=~"$instance",command=~"set|eval"}[5m])`: "",
		`rate(lockproxy_command_total[5m])`:                                             "metric lockproxy_command_total is in no mode's /metrics",
		`lockproxy_commands_total{outcom="ok"}`:                                         "metric lockproxy_commands_total has no label outcom",
		`lockproxy_commands_total{command=~"set|del"}`:                                  `metric lockproxy_commands_total has no series with command="del" (values ["eval" "set"])`,
	} {
		sels, err := parsePromQL(expr)
		if err != nil || len(sels) != 1 {
			t.Fatalf("parsePromQL(%q) = %d selectors, %v; want 1", expr, len(sels), err)
		}
		if got := series.lacks(sels[0]); got != want {
			t.Errorf("lacks(%q) = %q; want %q", expr, got, want)
		}
	}
}

// expoSeries are the series of a /metrics page: sample name → the label
// sets of its samples (histograms as their _bucket, _sum and _count).
type expoSeries map[string][]map[string]string

// parseExposition reads Prometheus's text format.
func parseExposition(text string) (expoSeries, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	samples, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{}, slices.Collect(maps.Values(fams))...)
	if err != nil {
		return nil, err
	}
	out := expoSeries{}
	for _, s := range samples {
		name := string(s.Metric[model.MetricNameLabel])
		labels := map[string]string{}
		for k, v := range s.Metric {
			if k != model.MetricNameLabel {
				labels[string(k)] = string(v)
			}
		}
		out[name] = append(out[name], labels)
	}
	return out, nil
}
