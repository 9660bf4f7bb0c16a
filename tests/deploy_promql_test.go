package tests

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// A light PromQL reader for the deploy checks (deploy_test.go): enough to
// find every vector selector of an expression and to catch the mistakes a
// hand-edited rule or dashboard makes (an unbalanced bracket, a malformed
// label matcher, a bad duration, a misspelt function), without the weight of
// github.com/prometheus/prometheus. It is not a full parser: operator
// placement is not checked.

// promSelector is one vector selector: a metric name (empty when the
// selector names none) and its label matchers.
type promSelector struct {
	Metric   string
	Matchers []promMatcher
}

// promMatcher is one label matcher: name, op (=, !=, =~, !~) and value.
type promMatcher struct {
	Name, Op, Value string
}

// promFunctions are PromQL's functions and aggregation operators.
var promFunctions = func() map[string]bool {
	m := map[string]bool{}
	for _, f := range strings.Fields(`abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time
		ceil changes clamp clamp_max clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year
		days_in_month deg delta deriv exp floor histogram_avg histogram_count histogram_fraction
		histogram_quantile histogram_stddev histogram_stdvar histogram_sum holt_winters hour idelta increase
		irate label_join label_replace last_over_time ln log10 log2 mad_over_time max_over_time
		min_over_time minute month pi predict_linear present_over_time quantile_over_time rad rate resets
		round scalar sgn sin sinh sort sort_by_label sort_by_label_desc sort_desc sqrt stddev_over_time
		stdvar_over_time sum_over_time tan tanh time timestamp vector year
		sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio`) {
		m[f] = true
	}
	return m
}()

// promKeywords are the words of PromQL that are neither metrics nor
// functions; the ones that take a label list are true.
var promKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"and": false, "or": false, "unless": false, "bool": false, "offset": false, "atan2": false,
	"inf": false, "nan": false,
}

// promGrafanaVars are the Grafana interval variables a dashboard query may
// use where PromQL takes a duration; the check reads them as 5m.
var promGrafanaVars = regexp.MustCompile(`\$(__rate_interval|__interval|__range)\b|\$\{(__rate_interval|__interval|__range)\}`)

var (
	promDuration = regexp.MustCompile(`^([0-9]+(ms|[smhdwy]))+$`)
	promSubquery = regexp.MustCompile(`^([0-9]+(ms|[smhdwy]))+:(([0-9]+(ms|[smhdwy]))+)?$`)
	promIdent    = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promNumber   = regexp.MustCompile(`^(0x[0-9a-fA-F]+|[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?)`)

	promTwoCharOps = map[string]bool{"==": true, "!=": true, "<=": true, ">=": true, "=~": true, "!~": true}
)

// promToken is one lexical token of an expression.
type promToken struct {
	kind byte // 'i' identifier, 'n' number, 's' string, 'p' punctuation or operator
	text string
}

// promLex splits expr into tokens. Strings keep their unquoted value.
func promLex(expr string) ([]promToken, error) {
	var toks []promToken
	s := promGrafanaVars.ReplaceAllString(expr, "5m")
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // a comment runs to the end of the line
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unclosed string at %d", i)
			}
			toks = append(toks, promToken{'s', s[i+1 : j]})
			i = j + 1
		case promIdent.MatchString(s[i:]):
			m := promIdent.FindString(s[i:])
			toks = append(toks, promToken{'i', m})
			i += len(m)
		case c >= '0' && c <= '9' || c == '.':
			m := promNumber.FindString(s[i:])
			for j := i + len(m); j < len(s) && (s[j] >= 'a' && s[j] <= 'z' || s[j] >= '0' && s[j] <= '9'); j++ {
				m = s[i : j+1] // a duration: 5m, 1h30m
			}
			if m == "" {
				return nil, fmt.Errorf("bad number at %d", i)
			}
			toks = append(toks, promToken{'n', m})
			i += len(m)
		default:
			op := string(c)
			if i+1 < len(s) && promTwoCharOps[s[i:i+2]] {
				op = s[i : i+2]
			}
			if !strings.Contains("()[]{},:+-*/%^=<>!~", string(c)) || op == "!" {
				return nil, fmt.Errorf("unexpected %q at %d", c, i)
			}
			toks = append(toks, promToken{'p', op})
			i += len(op)
		}
	}
	return toks, nil
}

// parsePromQL checks expr and returns its vector selectors.
func parsePromQL(expr string) ([]promSelector, error) {
	toks, err := promLex(expr)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("empty expression")
	}
	var sels []promSelector
	var stack []string
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		next := promToken{}
		if i+1 < len(toks) {
			next = toks[i+1]
		}
		switch {
		case tk.kind == 'i' && next.text == "(" && next.kind == 'p':
			if takesLabels, kw := promKeywords[strings.ToLower(tk.text)]; kw {
				if !takesLabels {
					continue // and (…), or (…): an operand in parentheses
				}
				j, err := promLabelList(toks, i+2)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", tk.text, err)
				}
				i = j
				continue
			}
			if !promFunctions[tk.text] {
				return nil, fmt.Errorf("unknown function %q", tk.text)
			}
		case tk.kind == 'i' && next.text == "{" && next.kind == 'p':
			sel, j, err := promMatchers(toks, i+2)
			if err != nil {
				return nil, fmt.Errorf("selector %s: %w", tk.text, err)
			}
			sel.Metric = tk.text
			sels = append(sels, sel)
			i = j
		case tk.kind == 'i' && promFunctions[tk.text] && (next.text == "by" || next.text == "without"):
			// sum by (…) (…): an aggregation, its grouping first
		case tk.kind == 'i':
			if _, kw := promKeywords[strings.ToLower(tk.text)]; !kw {
				sels = append(sels, promSelector{Metric: tk.text})
			}
		case tk.kind == 'p' && tk.text == "{":
			sel, j, err := promMatchers(toks, i+1)
			if err != nil {
				return nil, err
			}
			sels = append(sels, sel)
			i = j
		case tk.kind == 'p' && tk.text == "[":
			j := i + 1
			var d strings.Builder
			for ; j < len(toks) && toks[j].text != "]"; j++ {
				d.WriteString(toks[j].text)
			}
			if j == len(toks) {
				return nil, fmt.Errorf("unclosed [")
			}
			if !promDuration.MatchString(d.String()) && !promSubquery.MatchString(d.String()) {
				return nil, fmt.Errorf("bad range [%s]", d.String())
			}
			i = j
		case tk.kind == 'p' && tk.text == "(":
			stack = append(stack, "(")
		case tk.kind == 'p' && (tk.text == ")" || tk.text == "]" || tk.text == "}"):
			if len(stack) == 0 || tk.text != ")" {
				return nil, fmt.Errorf("unbalanced %q", tk.text)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 {
		return nil, fmt.Errorf("%d unclosed (", len(stack))
	}
	return sels, nil
}

// promLabelList reads the label names of by (…), on (…) and the like from
// toks[i:] and returns the index of the closing parenthesis.
func promLabelList(toks []promToken, i int) (int, error) {
	for label := true; i < len(toks); i++ { // label: a name may come next
		switch tk := toks[i]; {
		case tk.kind == 'p' && tk.text == ")":
			return i, nil
		case label && tk.kind == 'i':
			label = false
		case !label && tk.kind == 'p' && tk.text == ",":
			label = true
		default:
			return 0, fmt.Errorf("label list: unexpected %q", tk.text)
		}
	}
	return 0, fmt.Errorf("unclosed label list")
}

// promMatchers reads label matchers from toks[i:] up to the closing brace
// and returns them and the brace's index.
func promMatchers(toks []promToken, i int) (promSelector, int, error) {
	var sel promSelector
	for ; i < len(toks); i++ {
		if toks[i].kind == 'p' && toks[i].text == "}" {
			return sel, i, nil
		}
		if i+2 >= len(toks) || toks[i].kind != 'i' || toks[i+2].kind != 's' {
			return sel, 0, fmt.Errorf("matcher %d: want name op \"value\"", len(sel.Matchers)+1)
		}
		m := promMatcher{Name: toks[i].text, Op: toks[i+1].text, Value: toks[i+2].text}
		switch m.Op {
		case "=", "!=":
		case "=~", "!~":
			if _, err := regexp.Compile(m.Value); err != nil {
				return sel, 0, fmt.Errorf("matcher %s: %w", m.Name, err)
			}
		default:
			return sel, 0, fmt.Errorf("matcher %s: operator %q", m.Name, m.Op)
		}
		sel.Matchers = append(sel.Matchers, m)
		i += 3
		if i < len(toks) && toks[i].kind == 'p' && toks[i].text == "}" {
			return sel, i, nil
		}
		if i >= len(toks) || toks[i].text != "," {
			return sel, 0, fmt.Errorf("after matcher %s: want , or }", m.Name)
		}
	}
	return sel, 0, fmt.Errorf("unclosed {")
}

// TestDeployPromQLCheck: the light PromQL check refuses what a slip of the
// hand writes, and reads the selectors of a valid expression.
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
		got = append(got, fmt.Sprintf("%s%v", s.Metric, s.Matchers))
	}
	if want := `a_bucket[{command =~ set|eval} {x != y}] b[] c[] d[{e = f}]`; strings.Join(got, " ") != want {
		t.Errorf("selectors = %q; want %q", strings.Join(got, " "), want)
	}
	for name, bad := range map[string]string{
		"unclosed paren":      `sum(rate(a[5m])`,
		"extra paren":         `sum(a))`,
		"unclosed brace":      `a{b="c"`,
		"unquoted value":      `a{b=c}`,
		"bad operator":        `a{b=="c"}`,
		"missing comma":       `a{b="c" d="e"}`,
		"bad regexp":          `a{b=~"("}`,
		"bad duration":        `rate(a[5 minutes])`,
		"empty range":         `rate(a[])`,
		"unknown function":    `histogram_quantille(0.99, a)`,
		"unclosed string":     `a{b="c}`,
		"empty":               ``,
		"stray character":     `a ? b`,
		"bad label list":      `sum by (a b) (c)`,
		"spaced operator":     `a{b= ="c"}`,
		"grafana var outside": `a > $threshold`,
	} {
		if _, err := parsePromQL(bad); err == nil {
			t.Errorf("%s: parsePromQL(%q) accepted it", name, bad)
		}
	}
}

// expoSeries are the series of a /metrics page: sample name → the label
// sets of its samples (histograms as their _bucket, _sum and _count).
type expoSeries map[string][]map[string]string

// parseExposition reads Prometheus's text format, enough for the samples
// lockproxy writes.
func parseExposition(text string) (expoSeries, error) {
	out := expoSeries{}
	for n, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name := promIdent.FindString(line)
		if name == "" {
			return nil, fmt.Errorf("line %d: no metric name: %q", n+1, line)
		}
		labels := map[string]string{}
		rest := line[len(name):]
		if strings.HasPrefix(rest, "{") {
			toks, err := promLex(rest[:strings.LastIndexByte(rest, '}')+1])
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n+1, err)
			}
			sel, _, err := promMatchers(toks, 1)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n+1, err)
			}
			for _, m := range sel.Matchers {
				labels[m.Name] = m.Value
			}
		}
		out[name] = append(out[name], labels)
	}
	return out, nil
}
