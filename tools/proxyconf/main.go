// Command proxyconf renders the routing proxy's configuration,
// deploy/haproxy/haproxy-by-ip.cfg.tmpl, with a network and a pool
// (internal/proxyconf): as HAProxy's file, or as the Kubernetes
// ConfigMap the proxy's Deployment mounts (-configmap). Without
// -network and -pool it renders the values of
// deploy/kubernetes/proxy-config.yaml, which go generate writes:
//
//	go run ./tools/proxyconf -configmap -out deploy/kubernetes/proxy-config.yaml
//
// For another cluster:
//
//	go run ./tools/proxyconf -network '10.244.0.0/16' \
//	  -pool 'server-template aep 16 aep-pods.aep.svc.cluster.local:8765 resolvers cluster init-addr none' \
//	  -configmap -out proxy-config.yaml
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/aephost/aep/internal/proxyconf"
)

// poolFlag collects -pool, one server line each.
type poolFlag []string

func (p *poolFlag) String() string     { return strings.Join(*p, "; ") }
func (p *poolFlag) Set(s string) error { *p = append(*p, s); return nil }

func main() {
	tmpl := flag.String("template", proxyconf.TemplatePath, "the template")
	network := flag.String("network", "", "the addresses a session id may name: CIDRs separated by spaces (default: the Kubernetes values')")
	var pool poolFlag
	flag.Var(&pool, "pool", "a server or server-template line of the hosts for new sessions; repeat for more (default: the Kubernetes values')")
	configMap := flag.Bool("configmap", false, "write the ConfigMap aep-proxy-config instead of HAProxy's file")
	out := flag.String("out", "", "the file to write (default: standard output)")
	flag.Parse()
	if err := run(*tmpl, *network, pool, *configMap, *out); err != nil {
		fmt.Fprintln(os.Stderr, "proxyconf:", err)
		os.Exit(1)
	}
}

func run(tmplPath, network string, pool []string, configMap bool, out string) error {
	v := proxyconf.Kubernetes
	if network != "" || len(pool) > 0 {
		if network == "" || len(pool) == 0 {
			return fmt.Errorf("give both -network and -pool, or neither (the Kubernetes values)")
		}
		v = proxyconf.Values{Network: network, Pool: pool}
	}
	tmpl, err := os.ReadFile(tmplPath)
	if err != nil {
		return err
	}
	cfg, err := proxyconf.Render(string(tmpl), v)
	if err != nil {
		return err
	}
	if configMap {
		cfg = proxyconf.ConfigMap(cfg, v)
	}
	if out == "" {
		_, err = os.Stdout.WriteString(cfg)
		return err
	}
	return os.WriteFile(out, []byte(cfg), 0o644)
}
