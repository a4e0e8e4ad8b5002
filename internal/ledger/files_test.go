package ledger

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"symbi/internal/errcode"
)

// TestSymbiontDirChecked: .symbiont holds the project ledger and governed/; one that
// others may write, or that another user owns, would let them remove or replace
// ledger.jsonl (or put a FIFO there) and move governed/ away. The server refuses it as it
// refuses such a governed/, naming the rule, both where the project is opened
// (OpenProject, through the journal store) and where the ledger is (Open), and creates no
// ledger in it.
func TestSymbiontDirChecked(t *testing.T) {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	open := map[string]func(root *os.File) error{
		"OpenProject": func(root *os.File) error {
			w, _, err := OpenProject(root, "")
			if err == nil {
				w.Close()
			}
			return err
		},
		"Open": func(root *os.File) error {
			w, err := Open(root, key)
			if err == nil {
				w.Close()
			}
			return err
		},
	}
	for _, tc := range []struct {
		name string
		prep func(sym string) error
		want string
	}{
		{"world-writable", func(sym string) error { return os.Chmod(sym, 0o777) }, "has mode 0777"},
		{"group-writable", func(sym string) error { return os.Chmod(sym, 0o770) }, "has mode 0770"},
		{"another user's", func(sym string) error { return os.Chown(sym, 4242, 4242) }, "is owned by uid 4242"},
	} {
		for fn, openIt := range open {
			t.Run(tc.name+"/"+fn, func(t *testing.T) {
				dir, root := newRoot(t)
				sym := filepath.Join(dir, ".symbiont")
				if err := tc.prep(sym); err != nil {
					t.Skipf("cannot set up (chown needs root): %v", err)
				}
				err := openIt(root)
				if err == nil {
					t.Fatalf(".symbiont %s was accepted", tc.name)
				}
				if errcode.Of(err) != errcode.AuditUnavailable || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), ".symbiont") {
					t.Fatalf("refusal %v: want audit_unavailable naming .symbiont and %q", err, tc.want)
				}
				if _, serr := os.Lstat(filepath.Join(sym, FileName)); serr == nil {
					t.Fatalf("refused (%v), but a ledger was created in the refused directory", err)
				}
			})
		}
	}
}

// TestCheckpointFIFOLedger: audit checkpoint and audit prove read the ledger with
// ReadDurable; a FIFO at .symbiont/ledger.jsonl is refused as not a regular file
// (audit_unavailable), as ReadLog, VerifyProject and the writer refuse it — not reported
// as a failed fsync.
func TestCheckpointFIFOLedger(t *testing.T) {
	dir, root := newRoot(t)
	if err := syscall.Mkfifo(filepath.Join(dir, ".symbiont", FileName), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := ReadDurable(root)
	if errcode.Of(err) != errcode.AuditUnavailable || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("ReadDurable of a FIFO ledger: %v; want audit_unavailable, not a regular file", err)
	}
}

// TestLedgerFileMode: the ledger is created 0600 whatever the umask (no test of this
// package runs in parallel: the umask is the process's), and a ledger others may read or
// write is not continued (audit_unavailable, naming its mode).
func TestLedgerFileMode(t *testing.T) {
	old := syscall.Umask(0)
	dir, root := newRoot(t)
	w, err := Open(root, testKey())
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(runEntry(0)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	path := filepath.Join(dir, ".symbiont", FileName)
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || !st.Mode().IsRegular() {
		t.Fatalf("the ledger was created with mode %v, want a regular file 0600", st.Mode())
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o660} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		w, err := Open(root, testKey())
		if err == nil {
			w.Close()
			t.Errorf("a ledger of mode %04o was opened for appending", mode)
			continue
		}
		if errcode.Of(err) != errcode.AuditUnavailable || !strings.Contains(err.Error(), "mode") {
			t.Errorf("a ledger of mode %04o: %v; want audit_unavailable naming its mode", mode, err)
		}
	}
}
