package ledger

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"symbi/internal/errcode"
	"symbi/internal/journal"
)

// appendSigned appends to p's ledger (p.lw is closed) a line signed with the project key
// whose data is the raw JSON data, continuing the chain, verified or not.
func appendSigned(t *testing.T, p *project, typ, data string) {
	t.Helper()
	p.lw.Close()
	old := ledgerFile(t, p)
	ver := Verify(old, p.pub)
	prev := ZeroHash
	if n := len(ver.Entries); n > 0 {
		prev = ver.Entries[n-1].Hash
	}
	payload := `{"v":1,"seq":` + itoa(len(ver.Entries)) + `,"prev":"` + prev + `","time":"` + formatTime(time.Now()) +
		`","type":"` + typ + `","data":` + data + `}`
	line := journal.Seal(p.lw.key, Context, []byte(payload))
	if err := os.WriteFile(p.ledgerPath(), append(old, line...), 0o600); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestEntryData: the data of an entry of a known type is read as every reader of the
// format reads it, by exact member names and declared types (never null), or the line is
// refused,
// naming the rule: a run entry whose run_id is "ghost" and whose RUN_ID names a journal
// on disk (encoding/json alone would read RUN_ID for run_id) does not vouch for that
// journal, and an entry whose records is a string is refused for that, not for its run_id.
func TestEntryData(t *testing.T) {
	head := strings.Repeat("a", 64)
	for _, tc := range []struct{ name, data, want string }{
		{"a member named by case only", `{"run_id":"ghost","agent_id":"agent","agent":"a","file":"agent.run-0.jsonl","reason":"cancelled","released":false,"records":3,"head":"` + head + `","prev_head":"","caller":"stdio","RUN_ID":"run-0"}`,
			`run entry: member "RUN_ID" in the object at $ is "run_id" spelled otherwise`},
		{"a member of the wrong type", `{"run_id":"r1","agent_id":"agent","agent":"a","file":"agent.r1.jsonl","reason":"completed","released":true,"records":"3","head":"` + head + `","prev_head":"","caller":"stdio"}`,
			`run entry: member "records" is a JSON string, want an integer`},
		{"no run_id", `{"file":"agent.r1.jsonl","records":3,"head":"` + head + `"}`, `pruned entry without a run_id`},
		{"a null member", `{"run_id":"r1","agent_id":"agent","agent":"a","file":"agent.r1.jsonl","reason":"completed","released":null,"records":3,"head":"` + head + `","prev_head":"","caller":"stdio"}`,
			`run entry: member "released" is null, want true or false`},
		{"approval, a number for a string", `{"run_id":"r1","gate":7,"decision":"approve","reason":"","approver":"bob"}`,
			`approval entry: member "gate" is a JSON number, want a string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProjectRuns(t, 1)
			typ := TypeRun
			switch {
			case strings.HasPrefix(tc.want, "pruned"):
				typ = TypePruned
			case strings.HasPrefix(tc.want, "approval"):
				typ = TypeApproval
			}
			appendSigned(t, p, typ, tc.data)
			rep := Verify(ledgerFile(t, p), p.pub)
			if len(rep.Problems) != 1 || rep.Problems[0].Line != 2 || rep.Problems[0].Message != tc.want {
				t.Errorf("problems %+v, want line 2: %s", rep.Problems, tc.want)
			}
			if r := VerifyProject(p.dir, p.pub, nil); r.ExitCode() != 1 || !strings.Contains(strings.Join(r.Problems, "; "), tc.want) {
				t.Errorf("verify --project: exit %d, problems %q", r.ExitCode(), r.Problems)
			}
		})
	}
}

// TestEntryTimeMilliseconds: a ledger line's time is RFC 3339 UTC with milliseconds and
// "Z", exactly as the format says: without a fraction, or with nanoseconds, a signed line
// is refused.
func TestEntryTimeMilliseconds(t *testing.T) {
	key := testKey()
	pub := key.Public().(ed25519.PublicKey)
	data := `{"run_id":"r","agent_id":"agent","agent":"a","file":"agent.r.jsonl","reason":"completed","released":true,"records":5,"head":"` + strings.Repeat("a", 64) + `","prev_head":"","caller":"stdio"}`
	for tm, ok := range map[string]bool{
		"2025-01-01T00:00:00.000Z":       true,
		"2025-01-01T00:00:00Z":           false,
		"2025-01-01T00:00:00.1Z":         false,
		"2025-01-01T00:00:00.123456789Z": false,
	} {
		line := journal.Seal(key, Context, []byte(`{"v":1,"seq":0,"prev":"`+ZeroHash+`","time":"`+tm+`","type":"run","data":`+data+`}`))
		rep := Verify(line, pub)
		if got := len(rep.Problems) == 0; got != ok {
			t.Errorf("time %s: problems %v, want verified %v", tm, rep.Problems, ok)
		} else if !ok && !strings.Contains(rep.Problems[0].Message, "milliseconds") {
			t.Errorf("time %s: the problem %q does not name the rule", tm, rep.Problems[0].Message)
		}
	}
}

// TestVerifyMemoryBounded: what verification holds at once does not grow with lines that
// do not verify: 8 MiB of empty lines (8 million lines, the first the problem) costs what
// a few thousand do, not hundreds of bytes each.
func TestVerifyMemoryBounded(t *testing.T) {
	pub := testKey().Public().(ed25519.PublicKey)
	data := bytes.Repeat([]byte("\n"), 8<<20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rep := Verify(data, pub)
	runtime.ReadMemStats(&after)
	if len(rep.Problems) != 1 || rep.Problems[0].Line != 1 {
		t.Fatalf("problems %v, want one at line 1", rep.Problems)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Errorf("verifying 8 MiB of empty lines allocated %d MiB", alloc>>20)
	}
}

// TestOpenBoundsLedgerSize: the writer does not open a ledger larger than MaxLedgerBytes,
// which no verifier reads — with ErrFull, before reading it (a sparse 64 GiB file takes a
// few bytes on disk) — and appends nothing that would make the ledger larger.
func TestOpenBoundsLedgerSize(t *testing.T) {
	p := newProjectRuns(t, 1)
	p.lw.Close()
	if err := os.Truncate(p.ledgerPath(), 64<<30); err != nil { // sparse
		t.Skipf("cannot make a sparse 64 GiB file here: %v", err)
	}
	if w, err := Open(p.root(t), p.lw.key); !errors.Is(err, ErrFull) {
		if w != nil {
			w.Close()
		}
		t.Fatalf("Open of a 64 GiB ledger: %v", err)
	}

	dir, root := newRoot(t)
	w := openWriter(t, root)
	if _, err := w.Append(runEntry(0)); err != nil {
		t.Fatal(err)
	}
	w.max = w.size + 100 // the bound, MaxLedgerBytes, 100 bytes away
	if err := w.Room(100); err != nil {
		t.Errorf("Room(100) with 100 bytes left: %v", err)
	}
	if err := w.Room(RunRoom); !errors.Is(err, ErrFull) || errcode.Of(err) != errcode.AuditUnavailable {
		t.Errorf("Room(RunRoom) with 100 bytes left: %v; want audit_unavailable, ErrFull", err)
	}
	if _, err := w.Append(runEntry(1)); !errors.Is(err, ErrFull) {
		t.Errorf("an append past the bound: %v", err)
	}
	if st, err := os.Stat(filepath.Join(dir, ".symbiont", FileName)); err != nil || st.Size() != w.size {
		t.Errorf("the refused append wrote: %v, %v", st, err)
	}
}
