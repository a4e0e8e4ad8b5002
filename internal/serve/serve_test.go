package serve

import (
	"testing"

	"symbi/internal/errcode"
)

// TestJournalTextChoiceIsNotInternal: a mistyped SYMBI_JOURNAL_TEXT stops `symbi mcp` (it
// fails closed) as the operator's error, invalid_request, not as internal, which
// docs/errors.md keeps for a bug or an unexpected system failure.
func TestJournalTextChoiceIsNotInternal(t *testing.T) {
	for _, v := range []string{"hash", "HASHES", "hashes ", "none"} {
		_, err := journalTextChoice(v)
		if err == nil {
			t.Fatalf("SYMBI_JOURNAL_TEXT=%q accepted", v)
		}
		if code := errcode.Of(err); code == errcode.Internal {
			t.Errorf("SYMBI_JOURNAL_TEXT=%q refused as %s (%v); an operator's malformed setting is not a bug of symbi (want invalid_request)", v, code, err)
		}
	}
}
