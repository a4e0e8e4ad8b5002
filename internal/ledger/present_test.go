package ledger_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"symbi/internal/errcode"
	"symbi/internal/ledger"
)

// TestPresentSymlinkedSymbiont: a .symbiont that is a symbolic link (here to a directory
// holding no ledger) is not a project without a ledger: Present leaves it to the store,
// which refuses it by its rule, and prune says so rather than not_found.
func TestPresentSymlinkedSymbiont(t *testing.T) {
	dir := t.TempDir()
	elsewhere := t.TempDir() // no ledger there
	if err := os.Symlink(elsewhere, filepath.Join(dir, ".symbiont")); err != nil {
		t.Fatal(err)
	}
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := ledger.Present(root); errcode.Of(err) == errcode.NotFound {
		t.Errorf("Present: %v; a symlinked .symbiont is not a project without a ledger (the store refuses it by its rule)", err)
	}
	_, _, err = ledger.Prune(root, "", func(string, time.Time) bool { return true }, true)
	if err == nil || errcode.Of(err) == errcode.NotFound {
		t.Errorf("Prune of a project whose .symbiont is a symlink: %v; want the governed directory's refusal, not not_found", err)
	}
}
