// Package server is the aep kernel: configuration, the plugin registry and
// its lifecycle, sessions (handshake, tenants, capability gating,
// admission, cancel, events, expiry, budgets), dispatch by priority with
// exclusive and broadcast plugins, internal dispatch for capabilities that
// drive others, audit, and the transports' entry points with the
// in-process and stdio transports. Capability logic lives in plugins
// under capabilities/; the kernel knows them only through the generated
// handler interfaces of gen/msg. What outlives a session's connection
// (snapshots, forks, sessions that move, trajectories, session
// directories) is package server/persist, which the kernel reaches only
// through its persistence interface (persistence.go).
package server
