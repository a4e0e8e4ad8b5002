package main

import (
	"encoding/json"
	"fmt"
)

// printJSON writes v to the command's stdout as indented JSON (HTML characters not
// escaped). It reports false, after saying why on stderr, if v cannot be encoded.
func printJSON(e *env, cmd string, v any) bool {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(e.stderr, "symbi %s: %v\n", cmd, err)
		return false
	}
	return true
}
