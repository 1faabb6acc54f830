package server

import (
	"github.com/aephost/aep/server/sandbox"
)

// defaultSessionQuota bounds the bytes of one session directory.
const defaultSessionQuota int64 = 256 << 20

// SessionQuota is the byte quota of one session directory.
func (h *Host) SessionQuota() int64 {
	if q := h.cfg.Server.Isolation.SessionQuotaBytes; q > 0 {
		return q
	}
	return defaultSessionQuota
}

// SandboxMode is the configured mode of every contained process.
func (h *Host) SandboxMode() sandbox.Mode {
	if m := h.cfg.Server.Isolation.Sandbox; m != "" {
		return m
	}
	return sandbox.ModeAuto
}

// logIsolation says at start-up which tier contained processes get.
func (h *Host) logIsolation() {
	tier, what, err := sandbox.Describe(h.SandboxMode())
	if err != nil {
		h.log.Warn("isolation: the configured sandbox cannot be provided; capabilities that run processes will refuse to start", "mode", h.SandboxMode(), "err", err)
		return
	}
	sandbox.AllowUserNamespaces(h.cfg.Server.Isolation.AllowUserNamespaces)
	// What the host inherited from its parent reaches no child of its own.
	sandbox.SealInheritedFDs()
	sandbox.Prewarm(h.SandboxMode())
	h.log.Info("isolation", "tier", tier, "mechanism", what, "network", sandbox.DescribeNetwork(h.SandboxMode()),
		"user_namespaces", h.cfg.Server.Isolation.AllowUserNamespaces,
		"session_quota_bytes", h.SessionQuota(), "sessions_dir", h.persist.Root())
}
