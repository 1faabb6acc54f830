package proxyconf

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// root is the repository's root, from this package's directory.
var root = filepath.Join("..", "..")

func readTemplate(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, TemplatePath))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCheck(t *testing.T) {
	pool := []string{"server a 10.0.0.1:8765"}
	for _, tc := range []struct {
		name string
		v    Values
		want string // "" for no error, else part of the error
	}{
		{"kubernetes", Kubernetes, ""},
		{"fleet", Fleet, ""},
		{"an address alone", Values{Network: "10.1.2.3", Pool: pool}, ""},
		{"empty network", Values{Network: "  ", Pool: pool}, "network is empty"},
		{"a name", Values{Network: "example.com", Pool: pool}, "neither a CIDR"},
		{"an ACL injected", Values{Network: "10.0.0.0/8 }", Pool: pool}, "neither a CIDR"},
		{"a bad prefix", Values{Network: "10.0.0.0/33", Pool: pool}, "neither a CIDR"},
		{"empty pool", Values{Network: "10.0.0.0/8"}, "pool is empty"},
		{"a line that is no server", Values{Network: "10.0.0.0/8", Pool: []string{"http-request return status 200"}}, "not one server"},
		{"a second line smuggled", Values{Network: "10.0.0.0/8", Pool: []string{"server a 10.0.0.1:8765\n\tuse-server a if TRUE"}}, "not one server"},
		{"too short", Values{Network: "10.0.0.0/8", Pool: []string{"server a"}}, "not one server"},
		{"the by-ip server's name", Values{Network: "10.0.0.0/8", Pool: []string{"server aep-by-ip 10.0.0.1:8765"}}, "takes the name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.v.Check()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Check: %v, want an error with %q", err, tc.want)
			}
			if _, rerr := Render(readTemplate(t), tc.v); (rerr == nil) != (err == nil) {
				t.Fatalf("Render: %v, Check: %v", rerr, err)
			}
		})
	}
}

// TestConfigMapIsTheRendering: deploy/kubernetes/proxy-config.yaml holds
// the template rendered with the Kubernetes values, byte for byte, under
// the key the proxy's Deployment mounts.
func TestConfigMapIsTheRendering(t *testing.T) {
	want, err := Render(readTemplate(t), Kubernetes)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, ConfigMapPath))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Kind     string                `yaml:"kind"`
		Metadata struct{ Name string } `yaml:"metadata"`
		Data     map[string]string     `yaml:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Kind != "ConfigMap" || cm.Metadata.Name != "aep-proxy-config" {
		t.Fatalf("%s holds %s %s, want ConfigMap aep-proxy-config", ConfigMapPath, cm.Kind, cm.Metadata.Name)
	}
	if got := cm.Data[ConfigKey]; got != want {
		t.Fatalf("%s's %s is not the template rendered with the Kubernetes values (go generate):\n%s", ConfigMapPath, ConfigKey, lineDiff(got, want))
	}
	if string(b) != ConfigMap(want, Kubernetes) {
		t.Fatalf("%s is not what go generate writes", ConfigMapPath)
	}
}

// TestRenderingsDifferInValuesOnly: the fleet's rendering, which
// e2e/fleet_byip_test.go runs, and the Kubernetes one differ only in the
// network's line and the pool's lines.
func TestRenderingsDifferInValuesOnly(t *testing.T) {
	tmpl := readTemplate(t)
	strip := func(v Values) []string {
		cfg, err := Render(tmpl, v)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		nets, pools := 0, 0
		for _, line := range strings.Split(cfg, "\n") {
			trimmed := strings.TrimSpace(line)
			switch {
			case strings.HasSuffix(line, " -m ip "+v.Network):
				nets++
				out = append(out, strings.TrimSuffix(line, v.Network)+"NETWORK")
			case trimmed != "" && slices.Contains(v.Pool, trimmed):
				pools++
			default:
				out = append(out, line)
			}
		}
		if nets != 1 || pools != 2*len(v.Pool) {
			t.Fatalf("the network appears on %d lines (want 1), the pool's lines %d times (want %d, both backends)", nets, pools, 2*len(v.Pool))
		}
		return out
	}
	k, f := strip(Kubernetes), strip(Fleet)
	if a, b := strings.Join(k, "\n"), strings.Join(f, "\n"); a != b {
		t.Fatalf("the renderings differ outside the values:\n%s", lineDiff(a, b))
	}
}

// TestHAProxyAcceptsRenderings runs `haproxy -c` on both renderings.
func TestHAProxyAcceptsRenderings(t *testing.T) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		if bin = "/usr/sbin/haproxy"; !fileExists(bin) {
			if os.Getenv("CI") != "" {
				t.Fatal("haproxy is not installed (.ci/run installs it)")
			}
			t.Skip("haproxy is not installed (CI unset)")
		}
	}
	tmpl := readTemplate(t)
	for name, v := range map[string]Values{"kubernetes": Kubernetes, "fleet": Fleet} {
		t.Run(name, func(t *testing.T) {
			cfg, err := Render(tmpl, v)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(t.TempDir(), "haproxy.cfg")
			if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(bin, "-c", "-f", p).CombinedOutput(); err != nil {
				t.Fatalf("haproxy -c: %v\n%s", err, out)
			}
		})
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// lineDiff names the first line where a and b differ.
func lineDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d", i+1) + ":\n  got  " + x + "\n  want " + y
		}
	}
	return "(no line differs)"
}
