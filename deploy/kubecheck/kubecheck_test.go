package kubecheck

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// dir is deploy/kubernetes, from this module's directory.
var dir = filepath.Join("..", "kubernetes")

func load(t *testing.T) []Object {
	t.Helper()
	objs, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// find returns the object of type T named name.
func find[T interface{ GetName() string }](t *testing.T, objs []Object, name string) T {
	t.Helper()
	for _, o := range objs {
		if v, ok := o.Obj.(T); ok && v.GetName() == name {
			return v
		}
	}
	var zero T
	t.Fatalf("no %T named %s in deploy/kubernetes", zero, name)
	return zero
}

// TestDecodeIsStrict: the decoder refuses what the API server would
// refuse or silently drop, so that the manifests passing it means
// something.
func TestDecodeIsStrict(t *testing.T) {
	const head = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\n"
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"valid", head + "spec:\n  replicas: 2\n", ""},
		{"an unknown field", head + "spec:\n  replica: 2\n", `unknown field "spec.replica"`},
		{"a field twice", head + "spec:\n  replicas: 2\n  replicas: 3\n", "replicas"},
		{"a wrong type", head + "spec:\n  replicas: two\n", "replicas"},
		{"a field misplaced", head + "spec:\n  template:\n    spec:\n      sizeLimit: 1Gi\n", `unknown field "spec.template.spec.sizeLimit"`},
		{"an unknown kind", "apiVersion: apps/v1\nkind: Deployments\nmetadata:\n  name: x\n", "Deployments"},
		{"an unknown version", "apiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata:\n  name: x\n", "policy/v1beta1"},
		{"a bad quantity", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  volumes:\n    - name: d\n      emptyDir:\n        sizeLimit: 10 GB\n", "quantities must match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.doc))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Decode: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Decode: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestManifestsDecodeStrictly: every object of deploy/kubernetes decodes
// strictly, and the set is the one docs/deploy.md describes.
func TestManifestsDecodeStrictly(t *testing.T) {
	objs := load(t)
	var got []string
	for _, o := range objs {
		kind := fmt.Sprintf("%T", o.Obj)
		name := o.Obj.(interface{ GetName() string }).GetName()
		got = append(got, strings.TrimPrefix(kind, "*")+" "+name)
	}
	slices.Sort(got)
	want := []string{
		"v1.ConfigMap aep-config",
		"v1.ConfigMap aep-proxy-config",
		"v1.Deployment aep",
		"v1.Deployment aep-proxy",
		"v1.NetworkPolicy aep",
		"v1.PodDisruptionBudget aep",
		"v1.PodDisruptionBudget aep-proxy",
		"v1.Secret aep-auth",
		"v1.Secret aep-operator",
		"v1.Secret aep-store",
		"v1.Service aep",
		"v1.Service aep-pods",
		"v1.Service aep-proxy",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("deploy/kubernetes holds\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// hostConfig is the aep configuration of the ConfigMap aep-config, as
// the settings the checks below read, each with aep's default where the
// file leaves it out (docs/config.md).
type hostConfig struct {
	maxSessions     int64
	diskBytes       int64 // the largest disk budget of one session, any tenant's
	auditBytes      int64 // the audit log with its rotated files
	drainTimeout    time.Duration
	snapshotOnDrain bool
	trustedProxies  []string
}

func readHostConfig(t *testing.T, objs []Object) hostConfig {
	t.Helper()
	cm := find[*corev1.ConfigMap](t, objs, "aep-config")
	text, ok := cm.Data["aep.yaml"]
	if !ok {
		t.Fatal("the ConfigMap aep-config has no aep.yaml")
	}
	var c struct {
		Server struct {
			Limits struct {
				MaxSessions *int64 `json:"max_sessions"`
			} `json:"limits"`
			Isolation struct {
				SessionQuotaBytes *int64 `json:"session_quota_bytes"`
			} `json:"isolation"`
			Tenants []struct {
				Budgets struct {
					DiskBytes *int64 `json:"disk_bytes"`
				} `json:"budgets"`
			} `json:"tenants"`
			TrustedProxies []string `json:"trusted_proxies"`
		} `json:"server"`
		Audit struct {
			MaxSizeMB  *int64 `json:"max_size_mb"`
			MaxBackups *int64 `json:"max_backups"`
		} `json:"audit"`
		Operator struct {
			DrainTimeout    string `json:"drain_timeout"`
			SnapshotOnDrain bool   `json:"snapshot_on_drain"`
		} `json:"operator"`
	}
	// Only the settings read here; the whole file is checked against
	// aep's schema by cmd/aep/deploy_test.go, which serves it.
	if err := yaml.Unmarshal([]byte(text), &c); err != nil {
		t.Fatalf("aep-config's aep.yaml: %v", err)
	}
	or := func(p *int64, def int64) int64 {
		if p != nil {
			return *p
		}
		return def
	}
	h := hostConfig{
		maxSessions:     or(c.Server.Limits.MaxSessions, 10000),
		diskBytes:       or(c.Server.Isolation.SessionQuotaBytes, 256<<20),
		auditBytes:      or(c.Audit.MaxSizeMB, 10) * 1_000_000 * (or(c.Audit.MaxBackups, 5) + 1),
		drainTimeout:    30 * time.Second,
		snapshotOnDrain: c.Operator.SnapshotOnDrain,
		trustedProxies:  c.Server.TrustedProxies,
	}
	for _, tn := range c.Server.Tenants {
		h.diskBytes = max(h.diskBytes, or(tn.Budgets.DiskBytes, 0))
	}
	if c.Operator.DrainTimeout != "" {
		d, err := time.ParseDuration(c.Operator.DrainTimeout)
		if err != nil {
			t.Fatalf("operator.drain_timeout: %v", err)
		}
		h.drainTimeout = d
	}
	return h
}

// dataReserve is what the data volume holds beside the sessions'
// directories and the audit log: the plugins' own directories
// (<data-dir>/<plugin>) and file snapshots.
const dataReserve = 512 << 20

// storageRule says whether a data volume of sizeLimit holds maxSessions
// full sessions and the rest: otherwise the kubelet evicts the pod when
// they fill up, and every session on it is lost.
func storageRule(sizeLimit resource.Quantity, h hostConfig) error {
	need := h.maxSessions*h.diskBytes + h.auditBytes + dataReserve
	if sizeLimit.Value() < need {
		return fmt.Errorf("the data volume's sizeLimit %s holds less than server.limits.max_sessions %d x %d bytes a session + %d of audit log + %d reserved = %d bytes",
			sizeLimit.String(), h.maxSessions, h.diskBytes, h.auditBytes, int64(dataReserve), need)
	}
	return nil
}

func volume(t *testing.T, pod corev1.PodSpec, name string) corev1.Volume {
	t.Helper()
	for _, v := range pod.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("the pod has no volume %s", name)
	return corev1.Volume{}
}

func mountOf(t *testing.T, c corev1.Container, volume string) corev1.VolumeMount {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m
		}
	}
	t.Fatalf("container %s mounts no volume %s", c.Name, volume)
	return corev1.VolumeMount{}
}

// TestStorageSizedForSessions: the data volume (the --data-dir) is an
// emptyDir whose sizeLimit holds every session the host admits at its
// disk budget; the pod requests the ephemeral storage of its emptyDirs.
// The rule itself fails a pod admitting more sessions than fit.
func TestStorageSizedForSessions(t *testing.T) {
	objs := load(t)
	h := readHostConfig(t, objs)
	dep := find[*appsv1.Deployment](t, objs, "aep")
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	dataDir := ""
	for i, a := range c.Args {
		if a == "--data-dir" && i+1 < len(c.Args) {
			dataDir = c.Args[i+1]
		}
	}
	var data *corev1.Volume
	for _, m := range c.VolumeMounts {
		if m.MountPath == dataDir {
			v := volume(t, pod, m.Name)
			data = &v
		}
	}
	if data == nil || data.EmptyDir == nil || data.EmptyDir.SizeLimit == nil {
		t.Fatalf("--data-dir %q is not an emptyDir with a sizeLimit", dataDir)
	}
	if err := storageRule(*data.EmptyDir.SizeLimit, h); err != nil {
		t.Error(err)
	}
	t.Logf("data volume %s for %d sessions of %d MiB", data.EmptyDir.SizeLimit, h.maxSessions, h.diskBytes>>20)

	var sum resource.Quantity
	for _, v := range pod.Volumes {
		if v.EmptyDir != nil {
			if v.EmptyDir.SizeLimit == nil {
				t.Errorf("emptyDir %s has no sizeLimit", v.Name)
				continue
			}
			sum.Add(*v.EmptyDir.SizeLimit)
		}
	}
	if req := c.Resources.Requests[corev1.ResourceEphemeralStorage]; req.Cmp(sum) < 0 {
		t.Errorf("the container requests %s of ephemeral storage, less than its emptyDirs' %s", req.String(), sum.String())
	}

	// The rule bites: one session more than fits, or the default
	// max_sessions, is refused.
	fits := data.EmptyDir.SizeLimit.Value() - h.auditBytes - dataReserve
	for _, tc := range []struct {
		name        string
		maxSessions int64
		ok          bool
	}{
		{"as many as fit", fits / h.diskBytes, true},
		{"one more", fits/h.diskBytes + 1, false},
		{"aep's default", 10000, false},
	} {
		h2 := h
		h2.maxSessions = tc.maxSessions
		if err := storageRule(*data.EmptyDir.SizeLimit, h2); (err == nil) != tc.ok {
			t.Errorf("%s (%d sessions): %v", tc.name, tc.maxSessions, err)
		}
	}
}

// snapshotAllowance is what the grace period gives one session's drain
// snapshot (server/persist/drain.go takes them one after another, each
// bounded by 10 s). A planning figure, docs/deploy.md (Stopping).
const snapshotAllowance = 2 * time.Second

// drainLinger is the half second `aep serve` keeps its transports up
// after the drain (cmd/aep/serve.go), rounded up.
const drainLinger = time.Second

// TestGraceCoversDrain: terminationGracePeriodSeconds covers the whole
// drain — the preStop pause, requests in flight for drain_timeout, a
// snapshot of every session the pod admits, the linger — so the kubelet
// never kills a pod still saving sessions; the PodDisruptionBudget takes
// one pod at a time, never the last, and a rollout never takes one
// before its replacement is ready.
func TestGraceCoversDrain(t *testing.T) {
	objs := load(t)
	h := readHostConfig(t, objs)
	if !h.snapshotOnDrain {
		t.Error("operator.snapshot_on_drain is off: a drained pod's sessions cannot move")
	}
	dep := find[*appsv1.Deployment](t, objs, "aep")
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	var preStop time.Duration
	if ps := c.Lifecycle; ps != nil && ps.PreStop != nil && ps.PreStop.Sleep != nil {
		preStop = time.Duration(ps.PreStop.Sleep.Seconds) * time.Second
	} else {
		t.Error("no preStop sleep: the pod gets SIGTERM while proxies still send it new sessions")
	}
	if pod.TerminationGracePeriodSeconds == nil {
		t.Fatal("no terminationGracePeriodSeconds (the default 30 s)")
	}
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	need := preStop + h.drainTimeout + time.Duration(h.maxSessions)*snapshotAllowance + drainLinger
	if grace < need {
		t.Errorf("terminationGracePeriodSeconds %v < preStop %v + drain_timeout %v + %d sessions x %v + %v = %v",
			grace, preStop, h.drainTimeout, h.maxSessions, snapshotAllowance, drainLinger, need)
	}

	pdb := find[*policyv1.PodDisruptionBudget](t, objs, "aep")
	if pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, dep.Spec.Template.Labels) {
		t.Errorf("PodDisruptionBudget aep does not select the aep pods")
	}
	replicas := int32(1)
	if dep.Spec.Replicas != nil {
		replicas = *dep.Spec.Replicas
	}
	if mu := pdb.Spec.MaxUnavailable; mu == nil || mu.Type != intstr.Int || mu.IntVal != 1 || replicas < 2 {
		t.Errorf("PodDisruptionBudget aep: maxUnavailable %v with %d replicas, want 1 of at least 2 (one pod drains at a time)", mu, replicas)
	}
	if ru := dep.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Error("the rollout may stop a pod before its replacement is ready (maxUnavailable not 0)")
	}
}

func selects(sel, labels map[string]string) bool {
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

// TestEgressOnlyStoreAndDNS: the NetworkPolicy aep selects the aep pods
// and lets them open connections to DNS and to the store's port (the
// DSN's of secret.example.yaml) and nowhere else: every rule names its
// peers and its ports.
func TestEgressOnlyStoreAndDNS(t *testing.T) {
	objs := load(t)
	dep := find[*appsv1.Deployment](t, objs, "aep")
	np := find[*networkingv1.NetworkPolicy](t, objs, "aep")
	if !selects(np.Spec.PodSelector.MatchLabels, dep.Spec.Template.Labels) {
		t.Fatalf("NetworkPolicy aep selects %v, not the aep pods %v", np.Spec.PodSelector.MatchLabels, dep.Spec.Template.Labels)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		t.Fatal("NetworkPolicy aep does not restrict egress")
	}
	dsn, err := url.Parse(find[*corev1.Secret](t, objs, "aep-store").StringData["dsn"])
	if err != nil {
		t.Fatal(err)
	}
	storePort := 5432
	if p := dsn.Port(); p != "" {
		storePort, _ = strconv.Atoi(p)
	}
	allowed := map[string]bool{"UDP/53": true, "TCP/53": true, fmt.Sprintf("TCP/%d", storePort): true}
	seen := map[string]bool{}
	for i, r := range np.Spec.Egress {
		if len(r.To) == 0 || len(r.Ports) == 0 {
			t.Errorf("egress rule %d allows any peer or any port", i+1)
		}
		for _, p := range r.Ports {
			proto := corev1.ProtocolTCP
			if p.Protocol != nil {
				proto = *p.Protocol
			}
			if p.Port == nil || p.EndPort != nil {
				t.Errorf("egress rule %d allows a range of ports", i+1)
				continue
			}
			k := fmt.Sprintf("%s/%s", proto, p.Port.String())
			if !allowed[k] {
				t.Errorf("egress rule %d allows %s, neither DNS nor the store", i+1, k)
			}
			seen[k] = true
		}
		for _, peer := range r.To {
			if peer.IPBlock != nil && (peer.IPBlock.CIDR == "0.0.0.0/0" || peer.IPBlock.CIDR == "::/0") {
				t.Errorf("egress rule %d allows every address", i+1)
			}
		}
	}
	for k := range allowed {
		if !seen[k] {
			t.Errorf("no egress rule allows %s: the pods cannot reach it", k)
		}
	}
}

// TestRoutingProxy: the proxy's Deployment runs the ConfigMap
// aep-proxy-config's haproxy.cfg, listens where that file binds, is
// behind the Service aep-proxy; the file's pool is the headless Service
// listing every aep pod, ready or not, with a slot for each replica; the
// network it routes to is the one the hosts trust as proxies (the pod
// network); and the hosts' ids are their pod IPs.
func TestRoutingProxy(t *testing.T) {
	objs := load(t)
	h := readHostConfig(t, objs)
	cm := find[*corev1.ConfigMap](t, objs, "aep-proxy-config")
	cfg, ok := cm.Data["haproxy.cfg"]
	if !ok {
		t.Fatal("aep-proxy-config has no haproxy.cfg")
	}
	dep := find[*appsv1.Deployment](t, objs, "aep-proxy")
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("aep-proxy has %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	cfgPath := ""
	for i, a := range c.Args {
		if a == "-f" && i+1 < len(c.Args) {
			cfgPath = c.Args[i+1]
		}
	}
	v := volume(t, pod, "config")
	m := mountOf(t, c, "config")
	if v.ConfigMap == nil || v.ConfigMap.Name != cm.Name || cfgPath != m.MountPath+"/haproxy.cfg" {
		t.Errorf("haproxy -f %q is not aep-proxy-config's haproxy.cfg mounted at %s", cfgPath, m.MountPath)
	}
	bind := regexp.MustCompile(`(?m)^\s*bind "\$\{AEP_PROXY_BIND-:(\d+)\}"`).FindStringSubmatch(cfg)
	if bind == nil {
		t.Fatal("haproxy.cfg has no bind on AEP_PROXY_BIND's default port")
	}
	for _, e := range c.Env {
		if e.Name == "AEP_PROXY_BIND" {
			t.Errorf("the container sets AEP_PROXY_BIND; the port checks below assume the file's default")
		}
	}
	if len(c.Ports) != 1 || strconv.Itoa(int(c.Ports[0].ContainerPort)) != bind[1] {
		t.Errorf("aep-proxy's container ports %v, want the bind port %s", c.Ports, bind[1])
	}
	svc := find[*corev1.Service](t, objs, "aep-proxy")
	if !selects(svc.Spec.Selector, dep.Spec.Template.Labels) {
		t.Errorf("Service aep-proxy does not select the proxy's pods")
	}
	for _, p := range svc.Spec.Ports {
		if p.TargetPort.String() != c.Ports[0].Name && p.TargetPort.String() != bind[1] {
			t.Errorf("Service aep-proxy targets %s, not the proxy's port", p.TargetPort.String())
		}
	}

	aep := find[*appsv1.Deployment](t, objs, "aep")
	pods := find[*corev1.Service](t, objs, "aep-pods")
	if pods.Spec.ClusterIP != corev1.ClusterIPNone || !pods.Spec.PublishNotReadyAddresses || !selects(pods.Spec.Selector, aep.Spec.Template.Labels) {
		t.Errorf("Service aep-pods is not a headless Service of every aep pod, ready or not")
	}
	pool := regexp.MustCompile(`(?m)^\s*server-template \S+ (\d+) ([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local:(\d+) `).FindAllStringSubmatch(cfg, -1)
	if len(pool) != 2 {
		t.Fatalf("haproxy.cfg has %d server-template lines, want the pool in each backend", len(pool))
	}
	slots, _ := strconv.Atoi(pool[0][1])
	if pool[0][2] != pods.Name || int32(slots) < 2**aep.Spec.Replicas || pool[0][4] != "8765" {
		t.Errorf("the pool %q is not Service %s with room for twice %d replicas on port 8765", pool[0][0], pods.Name, *aep.Spec.Replicas)
	}
	network := regexp.MustCompile(`(?m)acl aep_in_network var\(txn\.aep_ip\) -m ip (.+)$`).FindStringSubmatch(cfg)
	if network == nil || !slices.Equal(strings.Fields(network[1]), h.trustedProxies) {
		t.Errorf("the proxy routes ids naming %v; the hosts trust %v as proxies: both are the pod network", network, h.trustedProxies)
	}
	hostID := false
	for _, e := range aep.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "AEP_HOST_ID" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP" {
			hostID = true
		}
	}
	if !hostID {
		t.Error("AEP_HOST_ID (server.host_id) is not the pod's IP: the proxy could not route by it")
	}
	if pdb := find[*policyv1.PodDisruptionBudget](t, objs, "aep-proxy"); pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, dep.Spec.Template.Labels) {
		t.Error("PodDisruptionBudget aep-proxy does not select the proxy's pods")
	}
}

// TestNoStrayFiles: every file of deploy/kubernetes is a manifest the
// checks above read.
func TestNoStrayFiles(t *testing.T) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".yaml") {
			t.Errorf("deploy/kubernetes/%s is not a .yaml manifest", e.Name())
		}
	}
}
