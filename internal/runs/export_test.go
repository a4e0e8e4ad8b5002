package runs

// SetTestAfterRead sets the hook build runs between the reading of a journal and the
// reading of its facts; nil removes it.
func SetTestAfterRead(f func()) { testAfterRead = f }

// SetTestExternalWait sets the hook called once a long poll of another process's run
// begins to look at its journal.
func SetTestExternalWait(f func()) { testExternalWait = f }

// SetTestBeforeBuild sets the hook build runs first, after the run's snapshot was taken.
func SetTestBeforeBuild(f func()) { testBeforeBuild = f }
