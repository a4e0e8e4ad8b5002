package invoke

// SetUngoverned switches r to the benchmark-only path (no journal, no policy), for the
// side-by-side benchmark in the external test package.
func SetUngoverned(r *Runner) { r.ungov = true }
