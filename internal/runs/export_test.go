package runs

// SetTestAfterRead sets the hook build runs between the reading of a journal and the
// reading of its facts; nil removes it.
func SetTestAfterRead(f func()) { testAfterRead = f }
