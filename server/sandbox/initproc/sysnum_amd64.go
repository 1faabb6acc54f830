package initproc

// System-call numbers the syscall package does not name.
const (
	sysSeccomp    = 317
	sysCloseRange = 436
)
