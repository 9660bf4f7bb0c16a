package tests

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// The deployment examples of deploy/compose and deploy/kubernetes are
// checked against the binary itself: every LOCKPROXY_* variable they set,
// with the image's own environment (the Dockerfile's ENV), passes
// lockproxy --check-config; the ports they publish are the ones it
// listens on; the quorum nodes they name are the Redis services they
// define, each persisting every write and never evicting; the probes and
// the ServiceMonitor ask the admin port's paths. No container engine runs
// here: what can be checked without one is.

// composeFile is what the tests read of a compose file.
type composeFile struct {
	Services map[string]struct {
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
		Command     []string          `yaml:"command"`
	} `yaml:"services"`
}

func TestDeployCompose(t *testing.T) {
	t.Parallel()
	bin := testsrv.BuildLockproxy(t)
	image := imageEnv(t)
	for _, name := range []string{"quorum.yml", "postgres.yml"} {
		t.Run(name, func(t *testing.T) {
			var f composeFile
			if err := yaml.Unmarshal(deployFile(t, "deploy/compose/"+name), &f); err != nil {
				t.Fatal(err)
			}
			lp, ok := f.Services["lockproxy"]
			if !ok {
				t.Fatal("no lockproxy service")
			}
			env := map[string]string{}
			for k, v := range lp.Environment {
				env[k] = composeVars.ReplaceAllString(v, "s3cret") // ${VAR:?…}: the operator's secret
			}
			listen, admin := checkConfig(t, bin, image, env)
			var published []string
			for _, p := range lp.Ports {
				_, container, _ := strings.Cut(p, ":")
				published = append(published, container)
			}
			if want := []string{listen, admin}; !slices.Equal(published, want) {
				t.Errorf("lockproxy publishes container ports %v; it listens on %v", published, want)
			}
			if nodes := env["LOCKPROXY_QUORUM_NODES"]; nodes != "" {
				for _, n := range strings.Split(nodes, ",") {
					host, _, _ := net.SplitHostPort(n)
					checkRedisArgs(t, host, f.Services[host].Command)
				}
			}
			if dsn := env["LOCKPROXY_POSTGRES_DSN"]; dsn != "" && !strings.Contains(dsn, "@postgres:") {
				t.Errorf("the DSN %q does not name the postgres service", dsn)
			}
		})
	}
}

// composeVars are compose's ${VAR:?message} substitutions.
var composeVars = regexp.MustCompile(`\$\{[A-Z_]+(:\?[^}]*)?\}`)

// k8sObject is what the tests read of a Kubernetes object.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Template struct {
			Spec struct {
				Containers []k8sContainer `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
		Ports []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort any    `yaml:"targetPort"`
		} `yaml:"ports"`
		Endpoints []struct {
			Port string `yaml:"port"`
			Path string `yaml:"path"`
		} `yaml:"endpoints"`
	} `yaml:"spec"`
}

type k8sContainer struct {
	Name string   `yaml:"name"`
	Args []string `yaml:"args"`
	Env  []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom any    `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	LivenessProbe  k8sProbe `yaml:"livenessProbe"`
	ReadinessProbe k8sProbe `yaml:"readinessProbe"`
}

type k8sProbe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

func TestDeployKubernetes(t *testing.T) {
	t.Parallel()
	bin := testsrv.BuildLockproxy(t)
	objs := map[string]k8sObject{} // by kind/name
	for _, file := range []string{"deploy/kubernetes/redis.yaml", "deploy/kubernetes/lockproxy.yaml"} {
		dec := yaml.NewDecoder(bytes.NewReader(deployFile(t, file)))
		for {
			var o k8sObject
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			objs[o.Kind+"/"+o.Metadata.Name] = o
		}
	}
	dep, ok := objs["Deployment/lockproxy"]
	if !ok || len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("no Deployment lockproxy with one container")
	}
	c := dep.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil {
			env[e.Name] = "from-the-cluster" // a Secret's or the pod's
		}
	}
	listen, admin := checkConfig(t, bin, imageEnv(t), env)
	ports := map[string]string{}
	for _, p := range c.Ports {
		ports[p.Name] = strconv.Itoa(p.ContainerPort)
	}
	if ports["resp"] != listen || ports["admin"] != admin {
		t.Errorf("container ports %v; lockproxy listens on resp %s, admin %s", ports, listen, admin)
	}
	for probe, want := range map[*k8sProbe]string{&c.LivenessProbe: "/healthz", &c.ReadinessProbe: "/readyz"} {
		if probe.HTTPGet.Path != want || probe.HTTPGet.Port != "admin" {
			t.Errorf("probe asks %s on %s; want %s on admin", probe.HTTPGet.Path, probe.HTTPGet.Port, want)
		}
	}
	svc := objs["Service/lockproxy"]
	for _, p := range svc.Spec.Ports {
		if target, _ := p.TargetPort.(string); ports[target] == "" {
			t.Errorf("Service lockproxy port %s targets %v, no container port of that name", p.Name, p.TargetPort)
		}
	}
	sm, ok := objs["ServiceMonitor/lockproxy"]
	if !ok || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "admin" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor lockproxy %+v; want one endpoint: port admin, path /metrics", sm.Spec.Endpoints)
	}
	nodes := strings.Split(env["LOCKPROXY_QUORUM_NODES"], ",")
	if len(nodes) != 3 {
		t.Fatalf("LOCKPROXY_QUORUM_NODES = %v; want 3 nodes", nodes)
	}
	for _, n := range nodes {
		host, port, _ := net.SplitHostPort(n)
		ss, ok := objs["StatefulSet/"+host]
		if !ok || len(ss.Spec.Template.Spec.Containers) != 1 {
			t.Errorf("node %s: no StatefulSet %s with one container", n, host)
			continue
		}
		checkRedisArgs(t, host, append([]string{"redis-server"}, ss.Spec.Template.Spec.Containers[0].Args...))
		rs := objs["Service/"+host]
		if len(rs.Spec.Ports) != 1 || strconv.Itoa(rs.Spec.Ports[0].Port) != port {
			t.Errorf("node %s: Service %s has ports %+v; want %s", n, host, rs.Spec.Ports, port)
		}
	}
}

// imageEnv is the Dockerfile's ENV: what the image runs with before an
// example's own variables.
func imageEnv(t *testing.T) map[string]string {
	env := map[string]string{}
	for _, kv := range strings.Fields(instruction(t, dockerfile(t), "ENV", "LOCKPROXY_")) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

// checkConfig runs lockproxy --check-config with the image's environment
// and then env, as the container would start, and returns the ports it
// would listen on. Every LOCKPROXY_ variable must be one of its keys.
func checkConfig(t *testing.T, bin string, image, env map[string]string) (listen, admin string) {
	t.Helper()
	all := map[string]string{}
	for k, v := range image {
		all[k] = v
	}
	for k, v := range env {
		if !strings.HasPrefix(k, "LOCKPROXY_") {
			t.Errorf("%s is not a lockproxy variable", k)
		}
		all[k] = v
	}
	cmd := exec.CommandContext(t.Context(), bin, "--check-config")
	cmd.Dir = t.TempDir() // no config.yaml of the tree's
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOCKPROXY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range all {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "configuration ok" {
		t.Errorf("lockproxy --check-config with %v: %v\n%s", env, err, out)
	}
	_, listen, _ = net.SplitHostPort(all["LOCKPROXY_LISTEN"])
	_, admin, _ = net.SplitHostPort(all["LOCKPROXY_ADMIN_LISTEN"])
	return listen, admin
}

// checkRedisArgs: a quorum node persists every write and never evicts a
// lock.
func checkRedisArgs(t *testing.T, node string, args []string) {
	t.Helper()
	line := strings.Join(args, " ")
	for _, want := range []string{"--appendonly yes", "--appendfsync always", "--maxmemory-policy noeviction"} {
		if !strings.Contains(line, want) {
			t.Errorf("node %s runs %q; want %s", node, line, want)
		}
	}
}
