package server

// SetBeforeAdmit makes f run between each request's checks and its
// admission, until the returned function is called.
func SetBeforeAdmit(f func()) (reset func()) {
	beforeAdmit.Store(&f)
	return func() { beforeAdmit.Store(nil) }
}
