//go:build race

package main

// Under -race the fake itself is built with -race too, so that a data race in it shows.
func init() { raceEnabled = true }
