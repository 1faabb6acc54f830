package inspector

// SetQueueBounds makes a page's queue small for a test and returns the
// undo.
func SetQueueBounds(messages int, bytes int64) (undo func()) {
	m, b := maxQueued, maxQueueBytes
	maxQueued, maxQueueBytes = messages, bytes
	return func() { maxQueued, maxQueueBytes = m, b }
}
