package main

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// problems are the reasons a configuration cannot be used, each one line
// "key: problem (fix)". They are reported all at once, so one start shows
// every mistake of the file, the environment and the flags.
type problems []string

func (p problems) Error() string { return strings.Join(p, "\n") }

// problem words a field's parse error as "where: problem (fix)"; where is
// the flag, the variable or the file position that gave the value.
func (f field) problem(where string, err error) string {
	msg := err.Error()
	if strings.HasSuffix(msg, ")") { // the error carries its own fix
		return where + ": " + msg
	}
	return fmt.Sprintf("%s: %s (e.g. %s)", where, msg, f.example)
}

// loadYAML applies the keys of a YAML file to fs. Every unknown key and
// every bad value is a problem naming the file, the line and the key;
// where is each key's position ("config.yaml:12"), for the problems
// validation finds later.
func loadYAML(path string, data []byte, fs []field) (probs problems, where map[string]string) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return problems{fmt.Sprintf("%s: %v (fix the YAML syntax)", path, err)}, nil
	}
	if len(doc.Content) == 0 { // an empty file
		return nil, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return problems{fmt.Sprintf("%s:%d: the file is not a mapping of keys (write key: value lines, as in the sample config.yaml)", path, root.Line)}, nil
	}
	where = map[string]string{}
	byName := map[string]field{}
	var names []string
	for _, f := range fs {
		byName[f.name] = f
		names = append(names, f.name)
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		where[k.Value] = fmt.Sprintf("%s:%d", path, k.Line)
		where := fmt.Sprintf("%s:%d: %s", path, k.Line, k.Value)
		f, ok := byName[k.Value]
		if !ok {
			probs = append(probs, where+": unknown key ("+suggest(k.Value, names, "", "remove it; the keys are the flag names of lockproxy --help")+")")
			continue
		}
		var err error
		switch {
		case f.yaml != nil:
			err = f.yaml(v)
		case v.Kind != yaml.ScalarNode:
			err = fmt.Errorf("expects a single value, not a list or mapping")
		default:
			err = f.set(v.Value)
		}
		if err != nil {
			probs = append(probs, f.problem(where, err))
		}
	}
	return probs, where
}

// lookupEnv finds name in env (os.Environ form).
func lookupEnv(env []string, name string) (string, bool) {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// envPrefix starts the name of every configuration variable.
const envPrefix = "LOCKPROXY_"

func envName(key string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

// loadEnv applies the LOCKPROXY_* variables of env to fs. A LOCKPROXY_
// variable that is no key but close to one is a problem (a typo silently
// ignored would leave the default in force); one far from every key may
// belong to something else (a deployment's own) and is left alone, as are
// LOCKPROXY_TEST_*, the test suite's.
func loadEnv(env []string, fs []field) problems {
	byName := map[string]field{}
	var names []string
	for _, f := range fs {
		byName[envName(f.name)] = f
		names = append(names, strings.TrimPrefix(envName(f.name), envPrefix))
	}
	var probs problems
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, envPrefix) {
			continue
		}
		f, known := byName[k]
		if !known {
			if strings.HasPrefix(k, envPrefix+"TEST_") { // the test suite's own (LOCKPROXY_TEST_PG_DSN)
				continue
			}
			if s := suggest(k, names, envPrefix, ""); s != "" {
				probs = append(probs, k+": unknown variable ("+s+")")
			}
			continue
		}
		if err := f.set(v); err != nil {
			probs = append(probs, f.problem(k, err))
		}
	}
	return probs
}

// flagProblem words an error of the flag parser (an unknown flag, a
// boolean flag given a value) as a problem.
func flagProblem(err error, fs []field) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var names []string
		for _, f := range fs {
			names = append(names, f.name)
		}
		names = append(names, "config", "check-config", "healthcheck")
		return "--" + name + ": unknown flag (" + suggest(name, names, "--", "lockproxy --help lists the flags") + ")"
	}
	return msg + " (lockproxy --help lists the flags)"
}

// suggest returns "did you mean X?" for the name closest to got (less
// prefix, which names lack and X gets back), when one
// is close enough to be a typo of it (Levenshtein distance at most a third
// of its length, at least 2), and otherwise fallback.
func suggest(got string, names []string, prefix, fallback string) string {
	got = strings.TrimPrefix(got, prefix)
	best, bestD := "", 0
	for _, n := range names {
		if d := distance(strings.ToLower(got), strings.ToLower(n)); best == "" || d < bestD {
			best, bestD = n, d
		}
	}
	if best != "" && bestD <= max(2, len(best)/3) {
		return "did you mean " + prefix + best + "?"
	}
	return fallback
}

// distance is the Levenshtein distance of a and b, in bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
