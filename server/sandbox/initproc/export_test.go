package initproc

// LookPath and its errors, for the tests that hold it to os/exec's rules.
var (
	LookPath    = lookPath
	ErrNotFound = errNotFound
	ErrDot      = errDot
)
