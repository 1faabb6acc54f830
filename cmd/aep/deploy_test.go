package main_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// The Kubernetes manifests of deploy/kubernetes, checked against this
// binary: kubeconform cannot run offline here (docs/deploy.md), so the
// test parses them and checks what a schema check would not: probe paths
// answered by a real `aep serve` with the ConfigMap's configuration, ports
// and names that agree across objects, every secret and variable the
// configuration needs, and the flags the container passes.

type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Spec       struct {
		// Deployment and PodDisruptionBudget.
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
		MaxUnavailable any `yaml:"maxUnavailable"`
		// Service (its selector is a plain map).
		Ports []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort any    `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
	ServiceSelector map[string]string `yaml:"-"`
}

type podSpec struct {
	TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsUser    int  `yaml:"runAsUser"`
		RunAsNonRoot bool `yaml:"runAsNonRoot"`
	} `yaml:"securityContext"`
	Containers []struct {
		Name  string   `yaml:"name"`
		Args  []string `yaml:"args"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		Env []struct {
			Name      string `yaml:"name"`
			ValueFrom struct {
				SecretKeyRef *struct{ Name, Key string } `yaml:"secretKeyRef"`
				FieldRef     *struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		ReadinessProbe probe `yaml:"readinessProbe"`
		LivenessProbe  probe `yaml:"livenessProbe"`
		Lifecycle      struct {
			PreStop struct {
				Sleep struct {
					Seconds int `yaml:"seconds"`
				} `yaml:"sleep"`
			} `yaml:"preStop"`
		} `yaml:"lifecycle"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	} `yaml:"containers"`
	Volumes []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

type probe struct {
	HTTPGet struct {
		Path        string                         `yaml:"path"`
		Port        any                            `yaml:"port"`
		HTTPHeaders []struct{ Name, Value string } `yaml:"httpHeaders"`
	} `yaml:"httpGet"`
}

func loadManifests(t *testing.T) map[string][]k8sObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "deploy", "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/kubernetes: %v", err)
	}
	out := map[string][]k8sObject{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var raw map[string]any
			if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			b, _ := yaml.Marshal(raw)
			var o k8sObject
			if err := yaml.Unmarshal(b, &o); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Fatalf("%s: an object without apiVersion, kind or name", f)
			}
			if o.Kind == "Service" {
				if spec, ok := raw["spec"].(map[string]any); ok {
					o.ServiceSelector = map[string]string{}
					for k, v := range spec["selector"].(map[string]any) {
						o.ServiceSelector[k] = fmt.Sprint(v)
					}
				}
			}
			out[o.Kind] = append(out[o.Kind], o)
		}
	}
	for kind, api := range map[string]string{"Deployment": "apps/v1", "Service": "v1", "PodDisruptionBudget": "policy/v1", "ConfigMap": "v1", "Secret": "v1"} {
		if len(out[kind]) == 0 {
			t.Fatalf("no %s in deploy/kubernetes", kind)
		}
		for _, o := range out[kind] {
			if o.APIVersion != api {
				t.Errorf("%s %s: apiVersion %s, want %s", kind, o.Metadata.Name, o.APIVersion, api)
			}
		}
	}
	return out
}

func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// named is the object of kind named name.
func named(t *testing.T, objs map[string][]k8sObject, kind, name string) k8sObject {
	t.Helper()
	for _, o := range objs[kind] {
		if o.Metadata.Name == name {
			return o
		}
	}
	t.Fatalf("no %s %s in deploy/kubernetes", kind, name)
	return k8sObject{}
}

func TestKubernetesManifests(t *testing.T) {
	objs := loadManifests(t)
	dep := named(t, objs, "Deployment", "aep")
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	podLabels := dep.Spec.Template.Metadata.Labels
	if !subset(dep.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("Deployment selector %v does not select its pods %v", dep.Spec.Selector.MatchLabels, podLabels)
	}
	if pdb := named(t, objs, "PodDisruptionBudget", "aep"); !subset(pdb.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("PodDisruptionBudget %s selects %v, not the pods %v", pdb.Metadata.Name, pdb.Spec.Selector.MatchLabels, podLabels)
	}

	// The image's user (Dockerfile) is the pod's.
	docker, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^USER 65534:65534$`).Match(docker) || !regexp.MustCompile(`(?m)CGO_ENABLED=0 go build`).Match(docker) {
		t.Error("Dockerfile: want a CGO_ENABLED=0 build and USER 65534:65534")
	}
	if pod.SecurityContext.RunAsUser != 65534 || !pod.SecurityContext.RunAsNonRoot {
		t.Errorf("pod securityContext runs as %d (nonroot %v), want 65534", pod.SecurityContext.RunAsUser, pod.SecurityContext.RunAsNonRoot)
	}

	// Every flag the container passes is a flag of `aep serve`.
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("container args %v: want serve …", c.Args)
	}
	_, usage, _ := runAEP(t, "serve", "--help")
	flagVals := map[string]string{}
	for i := 1; i < len(c.Args); i++ {
		name, ok := strings.CutPrefix(c.Args[i], "--")
		if !ok {
			t.Fatalf("container arg %q: want --flag value", c.Args[i])
		}
		if !strings.Contains(usage, "-"+name+" ") {
			t.Errorf("container flag --%s is not a flag of aep serve:\n%s", name, usage)
		}
		if i+1 < len(c.Args) {
			flagVals[name] = c.Args[i+1]
			i++
		}
	}

	// The configuration is the ConfigMap's, mounted where --config says.
	cfgPath := flagVals["config"]
	var cfgText string
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(cfgPath, m.MountPath+"/")
		if !ok {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			for _, cm := range objs["ConfigMap"] {
				if cm.Metadata.Name == v.ConfigMap.Name {
					cfgText = cm.Data[rel]
				}
			}
		}
	}
	if cfgText == "" {
		t.Fatalf("--config %s is not a key of a mounted ConfigMap", cfgPath)
	}

	// Every variable the configuration expands comes from the container's
	// environment; every secret it reads exists with that key.
	secrets := map[string]map[string]string{}
	for _, s := range objs["Secret"] {
		secrets[s.Metadata.Name] = s.StringData
	}
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := secrets[ref.Name][ref.Key]
			if !ok {
				t.Errorf("env %s: secret %s has no key %s (secret.example.yaml)", e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = v
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = "10.42.0.7" // what status.podIP gives on an IPv4 cluster
		}
	}
	for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`).FindAllStringSubmatch(cfgText, -1) {
		if _, ok := env[m[1]]; !ok {
			t.Errorf("the configuration expands ${%s}, which the container's env does not set", m[1])
		}
	}

	// Ports: the configuration's listen port is the container's, which
	// the probes and the Services name.
	listen := regexp.MustCompile(`(?m)^\s*listen:\s*(\S+)`).FindStringSubmatch(cfgText)
	if listen == nil {
		t.Fatal("the configuration sets no server.listen")
	}
	_, port, _ := net.SplitHostPort(listen[1])
	portNames := map[string]string{}
	for _, p := range c.Ports {
		portNames[p.Name] = fmt.Sprint(p.ContainerPort)
	}
	resolve := func(p any) string {
		if n, ok := portNames[fmt.Sprint(p)]; ok {
			return n
		}
		return fmt.Sprint(p)
	}
	for _, pr := range []struct {
		name string
		p    probe
		path string
	}{{"readinessProbe", c.ReadinessProbe, "/readyz"}, {"livenessProbe", c.LivenessProbe, "/healthz"}} {
		if pr.p.HTTPGet.Path != pr.path {
			t.Errorf("%s path %q, want %s", pr.name, pr.p.HTTPGet.Path, pr.path)
		}
		if got := resolve(pr.p.HTTPGet.Port); got != port {
			t.Errorf("%s port %s, want the listen port %s", pr.name, got, port)
		}
	}
	for _, s := range objs["Service"] {
		if s.Metadata.Name == "aep-proxy" {
			continue // the routing proxy's (proxy.yaml)
		}
		if !subset(s.ServiceSelector, podLabels) {
			t.Errorf("Service %s selects %v, not the pods %v", s.Metadata.Name, s.ServiceSelector, podLabels)
		}
		for _, p := range s.Spec.Ports {
			if got := resolve(p.TargetPort); got != port {
				t.Errorf("Service %s targets port %s, want %s", s.Metadata.Name, got, port)
			}
		}
	}
	if c.Lifecycle.PreStop.Sleep.Seconds <= 0 {
		t.Error("no preStop pause before the drain")
	}
	drain := 30 * time.Second
	if m := regexp.MustCompile(`(?m)^\s*drain_timeout:\s*(\S+)`).FindStringSubmatch(cfgText); m != nil {
		if drain, err = time.ParseDuration(m[1]); err != nil {
			t.Fatal(err)
		}
	}
	if grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second; grace <= drain+time.Duration(c.Lifecycle.PreStop.Sleep.Seconds)*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v leaves no time for preStop %ds and drain %v", grace, c.Lifecycle.PreStop.Sleep.Seconds, drain)
	}

	// The real binary serves that configuration (the DSN replaced by a
	// SQLite file, the address by a loopback port) and answers the probes
	// as the kubelet sends them.
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "aep.yaml")
	// The operator listener (metrics) on a loopback port of this run.
	opListen := regexp.MustCompile(`(?m)^operator:\n(?:  .*\n)*?  listen:\s*(\S+)`).FindStringSubmatch(cfgText + "\n")
	if opListen == nil {
		t.Fatal("the configuration sets no operator.listen: nothing serves /metrics")
	}
	_, opPort, _ := net.SplitHostPort(opListen[1])
	opAddr := freeLoopback(t)
	runCfg := strings.Replace(cfgText, "listen: "+opListen[1], "listen: "+opAddr, 1)
	if err := os.WriteFile(cfgFile, []byte(runCfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env["AEP_STORE_DSN"] = filepath.Join(dir, "aep.db")
	addr := freeLoopback(t)
	cmd := exec.Command(bin, "serve", "--config", cfgFile, "--data-dir", filepath.Join(dir, "data"), "--listen", addr)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("aep serve stderr:\n%s", stderr.String())
		}
	}()
	for _, pr := range []probe{c.ReadinessProbe, c.LivenessProbe} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+pr.HTTPGet.Path, nil)
			for _, h := range pr.HTTPGet.HTTPHeaders {
				if h.Name == "Host" {
					req.Host = h.Value
				} else {
					req.Header.Set(h.Name, h.Value)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("probe %s: %v %v", pr.HTTPGet.Path, err, resp)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// Prometheus, with deploy/prometheus/scrape.yaml, finds the pod's
	// /metrics from its labels and annotations, and reads it with the
	// operator token.
	scrapePod(t, dep.Spec.Template.Metadata.Labels, dep.Spec.Template.Metadata.Annotations, portNames, opPort, opAddr, env["AEP_OPERATOR_TOKEN"])
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// promLabel is a Kubernetes label or annotation name as Prometheus's
// Kubernetes discovery spells it in a __meta_ label.
func promLabel(name string) string {
	return regexp.MustCompile(`[^a-zA-Z0-9_]`).ReplaceAllString(name, "_")
}

// scrapePod runs the job of deploy/prometheus/scrape.yaml through
// `promtool check service-discovery` with the targets Prometheus's pod
// discovery makes of an aep pod and of a proxy pod (Debian's promtool is
// built without Kubernetes discovery, so they are given as static
// targets with the same __meta_ labels): the aep pod's target must be
// its operator port opPort with path /metrics, the proxy's dropped. Then
// it scrapes that path on the running host (at opAddr) with the token,
// and without it.
func scrapePod(t *testing.T, labels, annotations, containerPorts map[string]string, opPort, opAddr, token string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is not installed (.ci/run installs Debian's prometheus package)")
		}
		t.Skip("promtool is not installed (CI unset)")
	}
	if containerPorts["metrics"] != opPort {
		t.Errorf("the container port metrics is %q, operator.listen's port %s", containerPorts["metrics"], opPort)
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus", "scrape.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const podIP = "10.42.0.7"
	target := func(labels, annotations map[string]string, name string) string {
		var b strings.Builder
		// Pod discovery makes a target of each declared port; the first
		// is the http one.
		fmt.Fprintf(&b, "      - targets: [%q]\n        labels:\n", podIP+":"+containerPorts["http"])
		fmt.Fprintf(&b, "          __meta_kubernetes_namespace: default\n          __meta_kubernetes_pod_name: %s\n", name)
		for k, v := range labels {
			fmt.Fprintf(&b, "          __meta_kubernetes_pod_label_%s: %q\n", promLabel(k), v)
		}
		for k, v := range annotations {
			fmt.Fprintf(&b, "          __meta_kubernetes_pod_annotation_%s: %q\n", promLabel(k), v)
		}
		return b.String()
	}
	sd := "    kubernetes_sd_configs:\n      - role: pod\n"
	if !strings.Contains(string(raw), sd) {
		t.Fatalf("scrape.yaml has no pod discovery (%q)", sd)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(raw), sd, "    static_configs:\n"+target(labels, annotations, "aep-0")+
		target(map[string]string{"app.kubernetes.io/name": "aep-proxy"}, nil, "aep-proxy-0"), 1)
	cfg = strings.Replace(cfg, "/etc/prometheus/secrets/aep-operator/token", tokenFile, 1)
	cfgPath := filepath.Join(dir, "prometheus.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "config", cfgPath).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
	out, err := exec.Command(promtool, "check", "service-discovery", "--timeout=3s", cfgPath, "aep").Output()
	if err != nil {
		t.Fatalf("promtool check service-discovery: %v\n%s", err, out)
	}
	var targets []struct {
		Labels map[string]string `json:"labels"`
	}
	if err := json.Unmarshal(out, &targets); err != nil {
		t.Fatalf("promtool's targets: %v\n%s", err, out)
	}
	// A dropped target is listed with no labels.
	var kept []map[string]string
	for _, tg := range targets {
		if len(tg.Labels) > 0 {
			kept = append(kept, tg.Labels)
		}
	}
	if len(targets) != 2 || len(kept) != 1 {
		t.Fatalf("the job keeps %d of %d targets of an aep pod and a proxy pod, want the aep pod's:\n%s", len(kept), len(targets), out)
	}
	got := kept[0]
	if got["__address__"] != podIP+":"+opPort || got["__metrics_path__"] != "/metrics" || got["pod"] != "aep-0" {
		t.Fatalf("the job scrapes %s%s of pod %s, want %s:%s/metrics of aep-0", got["__address__"], got["__metrics_path__"], got["pod"], podIP, opPort)
	}
	for _, tc := range []struct {
		auth string
		code int
	}{{"Bearer " + token, http.StatusOK}, {"", http.StatusUnauthorized}, {"Bearer wrong-token-0123456789", http.StatusUnauthorized}} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+opAddr+got["__metrics_path__"], nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || (tc.code == http.StatusOK && !strings.Contains(string(b), "aep_build_info{")) {
			t.Errorf("GET /metrics with %q: %d (want %d)\n%.300s", strings.SplitN(tc.auth, " ", 2)[0], resp.StatusCode, tc.code, b)
		}
	}
}
