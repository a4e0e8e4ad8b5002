// Package buildinfo holds the version of symbi, recorded in journals and printed by
// "symbi version". Release builds set it with
// -ldflags "-X symbi/internal/buildinfo.Version=v1.2.3".
package buildinfo

// Version is the version of this build.
var Version = "0.1.0-dev"
