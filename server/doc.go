// Package server is the aep kernel: configuration, the plugin registry and
// its lifecycle, sessions (handshake, capability gating, admission, cancel,
// events, expiry), dispatch by priority with exclusive and broadcast plugins,
// internal dispatch for capabilities that drive others, audit, and the
// in-process transport. Capability logic lives in plugins under
// capabilities/; the kernel knows them only through the generated handler
// interfaces of gen/msg.
package server
