package dsl

import (
	"encoding/json"
	"testing"
)

// TestJSONNumber: a number literal of the grammar is shown as a valid JSON number of the
// same value: separators and the integer part's leading zeros dropped.
func TestJSONNumber(t *testing.T) {
	for lit, want := range map[string]string{
		"0": "0", "7": "7", "007": "7", "000": "0", "10": "10", "1_000": "1000", "0_1": "1",
		"00.5": "0.5", "0.0": "0.0", "1.25": "1.25",
	} {
		got := jsonNumber(lit)
		if string(got) != want || !json.Valid([]byte(got)) {
			t.Errorf("jsonNumber(%q) = %q, want %q (valid JSON)", lit, got, want)
		}
	}
}
