// Package kubecheck checks the Kubernetes objects of deploy/kubernetes
// against the Kubernetes API's own Go types, strictly (an unknown or
// repeated field, a wrong type or an unknown kind fails), and then
// checks what the types cannot: the data volume sized for the sessions a
// pod admits, the grace period covering a drain, the egress the
// NetworkPolicy allows, and the routing proxy's objects agreeing with
// its configuration. Its tests are the check; `.ci/run` runs them.
//
// It is a module of its own so that the root module's `go test ./...`
// does not pull the Kubernetes API modules. What needs the aep binary
// (probes answered by a real `aep serve`, the scrape job, flags) is
// cmd/aep/deploy_test.go's; the proxy's ConfigMap being the rendering of
// deploy/haproxy/haproxy-by-ip.cfg.tmpl is internal/proxyconf's.
package kubecheck
