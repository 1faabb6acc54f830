package main_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// hostMemoryAllowance is what the host itself may hold beside its
// sessions' budgets: its heap, caches and the files archives of the
// sessions being saved at once (server/persist/crashwin.go).
const hostMemoryAllowance = 1 << 30

// TestPodMemoryBoundsSessions: the shipped Kubernetes pod cannot be
// OOM-killed by what its sessions may start — its memory limit is at
// least the host's allowance plus max_sessions times a session's
// sandboxed processes and working memory, as the ConfigMap bounds them,
// and it requests what it may use — and the ConfigMap turns the crash
// window on (docs/deploy.md, Memory; What a host that dies loses).
func TestPodMemoryBoundsSessions(t *testing.T) {
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	readYAML(t, "configmap.yaml", &cm)
	var cfg struct {
		Server struct {
			Limits struct {
				MaxSessions int64 `yaml:"max_sessions"`
			} `yaml:"limits"`
			Budgets struct {
				Sandbox int64 `yaml:"sandbox_memory_bytes"`
				Process int64 `yaml:"process_memory_bytes"`
				Working int64 `yaml:"working_memory_bytes"`
			} `yaml:"budgets"`
			Snapshots struct {
				CrashWindow   string `yaml:"crash_window"`
				FilesMaxBytes int64  `yaml:"files_max_bytes"`
			} `yaml:"snapshots"`
		} `yaml:"server"`
		Store struct {
			DSN string `yaml:"dsn"`
		} `yaml:"store"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["aep.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	s := cfg.Server
	if s.Limits.MaxSessions <= 0 || s.Budgets.Sandbox <= 0 || s.Budgets.Process <= 0 || s.Budgets.Working <= 0 {
		t.Fatalf("the ConfigMap leaves a session's memory or the sessions unbounded: %+v", s)
	}
	if s.Budgets.Process > s.Budgets.Sandbox {
		t.Fatalf("one process may take %d bytes, more than its session's %d", s.Budgets.Process, s.Budgets.Sandbox)
	}
	if w, err := time.ParseDuration(s.Snapshots.CrashWindow); err != nil || w <= 0 || cfg.Store.DSN == "" {
		t.Fatalf("the ConfigMap does not turn the crash window on with a store: %q %v, dsn %q", s.Snapshots.CrashWindow, err, cfg.Store.DSN)
	}
	if 4*s.Snapshots.FilesMaxBytes > hostMemoryAllowance/4 {
		t.Fatalf("four saves at once hold %d bytes of files, past a quarter of the host's allowance", 4*s.Snapshots.FilesMaxBytes)
	}
	need := hostMemoryAllowance + s.Limits.MaxSessions*(s.Budgets.Sandbox+s.Budgets.Working)

	var dep struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Name      string `yaml:"name"`
						Resources struct {
							Requests map[string]string `yaml:"requests"`
							Limits   map[string]string `yaml:"limits"`
						} `yaml:"resources"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	readYAML(t, "deployment.yaml", &dep)
	cs := dep.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("%d containers, want aep alone", len(cs))
	}
	limit := quantity(t, cs[0].Resources.Limits["memory"])
	if limit < need {
		t.Fatalf("the pod's memory limit %d is below what its sessions may take: %d (1 GiB + %d × (%d + %d))",
			limit, need, s.Limits.MaxSessions, s.Budgets.Sandbox, s.Budgets.Working)
	}
	if req := quantity(t, cs[0].Resources.Requests["memory"]); req != limit {
		t.Fatalf("the pod requests %d bytes of memory and may use %d: the node may evict it under pressure", req, limit)
	}
}

func readYAML(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// quantity reads a Kubernetes memory quantity with a binary suffix.
func quantity(t *testing.T, q string) int64 {
	t.Helper()
	for suf, mul := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40} {
		if n, ok := strings.CutSuffix(q, suf); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("quantity %q: %v", q, err)
			}
			return v * mul
		}
	}
	v, err := strconv.ParseInt(q, 10, 64)
	if err != nil {
		t.Fatalf("quantity %q: want bytes or Ki, Mi, Gi, Ti", q)
	}
	return v
}
