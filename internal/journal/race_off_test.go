//go:build !race

package journal

// raceEnabled reports a -race build, where the pure-Go signature checks run ~10× slower.
const raceEnabled = false
