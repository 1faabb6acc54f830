package initproc

// System-call numbers the syscall package does not name.
const (
	sysSeccomp    = 277
	sysCloseRange = 436
)
