package journal

// The tests of this file pin security checks of the journal, one check each: what the
// verifier, the readers and Reopen refuse, the bounds on records, files and reads, the
// writer's fail-stop, and the impossible stories the run's state machine refuses.

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// vectorPrivateKey is the private key of the vectors (vectorSeed).
func vectorPrivateKey() ed25519.PrivateKey {
	seed, _ := hex.DecodeString(vectorSeed)
	return ed25519.NewKeyFromSeed(seed)
}

// signedChain signs payload templates with the vector key as consecutive lines: "PREV" in
// each is replaced by the hash of the line before (ZeroHash for the first).
func signedChain(templates ...string) []byte {
	var out []byte
	prev := ZeroHash
	for _, tpl := range templates {
		l := signLine(strings.ReplaceAll(tpl, "PREV", prev))
		out = append(out, l...)
		prev = lineHash(l)
	}
	return out
}

// startedTemplate is the payload of a minimal started record, for signedChain.
const startedTemplate = `{"v":1,"run_id":"r","seq":0,"prev":"PREV","time":"2026-01-02T03:04:05.000Z","agent_id":"a","type":"started","data":{}}`

// countLines returns the number of lines in the file at path.
func countLines(t *testing.T, path string) int {
	t.Helper()
	return bytes.Count(mustRead(t, path), []byte{'\n'})
}

// TestVerifyFileNameNamesTheAgent: a journal's file name names its agent as well as its
// run. A run's journal renamed to another agent's name is refused, as one renamed to
// another run's is, so that a journal cannot be passed off as another agent's.
func TestVerifyFileNameNamesTheAgent(t *testing.T) {
	s := storeWithSeed(t, bytes.Repeat([]byte{7}, 32))
	w := writeRun(t, s, allowedRunDef, "run-named", -1)
	if r := Verify(w.Path(), s.PublicKey(), VerifyOptions{}); r.ExitCode() != 0 {
		t.Fatalf("original: %s", reportJSON(r))
	}
	moved := filepath.Join(s.Dir(), FileName(agentID("someone-else"), "run-named"))
	if err := os.Rename(w.Path(), moved); err != nil {
		t.Fatal(err)
	}
	r := Verify(moved, s.PublicKey(), VerifyOptions{})
	if r.ExitCode() != 1 || !strings.Contains(reportJSON(r), "file name") {
		t.Fatalf("a journal under another agent's file name: exit %d, %s", r.ExitCode(), reportJSON(r))
	}
}

// TestReadLogBounds: ReadLog takes a file of exactly its limit, refuses one a byte over
// it, and never returns more than the limit from a file whose size stat does not tell (a
// procfs file stats as 0 bytes), so that a file growing while it is read cannot make the
// reader hold more than its bound.
func TestReadLogBounds(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ten")
	if err := os.WriteFile(p, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadLog(p, 10); err != nil || len(b) != 10 {
		t.Fatalf("a file of exactly the limit: %d bytes, %v", len(b), err)
	}
	if _, err := ReadLog(p, 9); err == nil {
		t.Fatal("a file over the limit was read")
	}
	b, err := ReadLog("/proc/self/status", 8)
	if err == nil || len(b) > 8 {
		t.Fatalf("a file that grew past the limit: %d bytes returned, err %v", len(b), err)
	}
}

// TestBadKeyEmptyJournal: a public key of the wrong size makes the report invalid even
// when the journal has no line to check it on; a key that can verify nothing must not
// pass any journal.
func TestBadKeyEmptyJournal(t *testing.T) {
	pub := vectorKey()
	for _, key := range []ed25519.PublicKey{pub[:31], append(bytes.Clone(pub), 0), nil} {
		if r := verifyBytes(nil, key, VerifyOptions{}); r.ExitCode() != 1 {
			t.Errorf("empty journal with a %d-byte key: exit %d, %s", len(key), r.ExitCode(), reportJSON(r))
		}
	}
}

// TestReceiptEveryMember: a receipt must match the journal in both its members, head and
// records, and a receipt naming only one of them is still checked, so that a journal cut
// back or extended after the receipt was given is caught.
func TestReceiptEveryMember(t *testing.T) {
	pub := vectorKey()
	data := readVector(t, "allowed.jsonl")
	full := verifyBytes(data, pub, VerifyOptions{})
	if full.ExitCode() != 0 {
		t.Fatal(reportJSON(full))
	}
	for _, o := range []VerifyOptions{
		{Head: full.Head, Records: full.Records - 1},
		{Head: full.Head, Records: full.Records + 1},
		{Head: full.Head},
		{Records: full.Records},
		{Records: full.Records + 2},
	} {
		if r := verifyBytes(data, pub, o); r.ExitCode() != 1 {
			t.Errorf("receipt %+v against %d records head %s: exit %d", o, full.Records, full.Head, r.ExitCode())
		}
	}
}

// TestTerminatedWithTornTail: spec "Exit 0: ... the run is complete (terminated present,
// no tail ...)". A journal whose terminated record is followed by a torn tail is not
// complete and does not exit 0, and the tail's bytes are counted.
func TestTerminatedWithTornTail(t *testing.T) {
	data := append(readVector(t, "allowed.jsonl"), `{"payload":{"v":1`...)
	r := verifyBytes(data, vectorKey(), VerifyOptions{})
	if r.ExitCode() == 0 || r.Complete || r.TailBytes != len(`{"payload":{"v":1`) {
		t.Fatalf("terminated then a torn tail: exit %d complete %v tail %d", r.ExitCode(), r.Complete, r.TailBytes)
	}
}

// startedWithLineOf returns a Started whose line, written by w, is exactly n bytes.
func startedWithLineOf(t *testing.T, w *Writer, n int) Started {
	t.Helper()
	st := Started{Agent: "a", Prompt: "p"}
	l, err := w.line(st)
	if err != nil {
		t.Fatal(err)
	}
	st.Prompt = strings.Repeat("p", 1+n-len(l))
	if l, _ := w.line(st); len(l) != n {
		t.Fatalf("built a line of %d bytes, want %d", len(l), n)
	}
	return st
}

// TestRecordLimitBoundary: spec "A record ≤ 1 MiB". The writer and the verifier take a
// line of exactly MaxRecordBytes and both refuse one byte more, so that the two agree on
// the limit to the byte.
func TestRecordLimitBoundary(t *testing.T) {
	w := newWriter(nil, "", vectorPrivateKey(), "a", "r")
	w.now = fixedClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	atLimit := startedWithLineOf(t, w, MaxRecordBytes)
	over := startedWithLineOf(t, w, MaxRecordBytes+1)
	if _, err := w.Prepare(atLimit); err != nil {
		t.Errorf("writer: a line of exactly MaxRecordBytes refused: %v", err)
	}
	if _, err := w.Prepare(over); !errors.Is(err, ErrRecordTooLarge) {
		t.Errorf("writer: a line of MaxRecordBytes+1: %v, want ErrRecordTooLarge", err)
	}
	pub := vectorKey()
	line, _ := w.line(atLimit)
	if r := verifyBytes(line, pub, VerifyOptions{}); r.ExitCode() != 2 || r.Records != 1 {
		t.Errorf("verifier: a line of exactly MaxRecordBytes: exit %d, %v", r.ExitCode(), r.Problems)
	}
	line, _ = w.line(over)
	if r := verifyBytes(line, pub, VerifyOptions{}); r.ExitCode() != 1 || !strings.Contains(reportJSON(r), "record limit") {
		t.Errorf("verifier: a line of MaxRecordBytes+1: exit %d, %v", r.ExitCode(), r.Problems)
	}
}

// TestPayloadMemberTypes: payloads signed by the key's holder that break the format are
// refused: run_id, agent_id and type must be strings, data an object, a terminated
// record's released a boolean, and the payload valid UTF-8. A good signature says who
// wrote a line, not that the line is well formed, and no reader may guess at a member of
// the wrong type.
func TestPayloadMemberTypes(t *testing.T) {
	term := func(data string) string {
		return `{"v":1,"run_id":"r","seq":1,"prev":"PREV","time":"2026-01-02T03:04:06.000Z","agent_id":"a","type":"terminated","data":` + data + `}`
	}
	if r := verifyBytes(signedChain(startedTemplate, term(`{"reason":"cancelled","released":false}`)), vectorKey(), VerifyOptions{}); r.ExitCode() != 0 {
		t.Fatalf("the well-formed run: %s", reportJSON(r))
	}
	tests := map[string][]byte{
		"run_id a number":       signedChain(strings.Replace(startedTemplate, `"run_id":"r"`, `"run_id":5`, 1)),
		"agent_id null":         signedChain(strings.Replace(startedTemplate, `"agent_id":"a"`, `"agent_id":null`, 1)),
		"type a number":         signedChain(strings.Replace(startedTemplate, `"type":"started"`, `"type":7`, 1)),
		"data a string":         signedChain(strings.Replace(startedTemplate, `"data":{}`, `"data":"x"`, 1)),
		"data an array":         signedChain(strings.Replace(startedTemplate, `"data":{}`, `"data":[]`, 1)),
		"released missing":      signedChain(startedTemplate, term(`{"reason":"cancelled"}`)),
		"released a string":     signedChain(startedTemplate, term(`{"reason":"cancelled","released":"false"}`)),
		"released a number":     signedChain(startedTemplate, term(`{"reason":"cancelled","released":0}`)),
		"invalid UTF-8 in data": signedChain(strings.Replace(startedTemplate, `"data":{}`, "\"data\":{\"agent\":\"\xff\"}", 1)),
	}
	for name, data := range tests {
		if r := verifyBytes(data, vectorKey(), VerifyOptions{}); r.ExitCode() != 1 {
			t.Errorf("%s: exit %d, %s", name, r.ExitCode(), reportJSON(r))
		}
	}
}

// TestRunIDConstant: spec "run_id same on every line". Lines signed by the key's holder
// and chained, whose run_id changes partway, are refused: a journal tells one run.
func TestRunIDConstant(t *testing.T) {
	recs := allowedRunDef.records()
	w := newWriter(nil, "", vectorPrivateKey(), agentID("greeter"), "run-one")
	w.now = fixedClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	var data []byte
	for i, rec := range recs {
		if i == 2 {
			w.runID = "run-two"
		}
		line, err := w.line(rec)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, line...)
		w.seq++
		w.prev = lineHash(line)
	}
	r := verifyBytes(data, vectorKey(), VerifyOptions{})
	if r.ExitCode() != 1 || !strings.Contains(reportJSON(r), "run_id") {
		t.Fatalf("run_id changed at line 3: exit %d, %s", r.ExitCode(), reportJSON(r))
	}
}

// TestOpenRefusesBadSignature: Open and OpenAll, the exported openers the project ledger
// uses, refuse a line whose signature does not verify and return no payload for it, and
// Open refuses a journal line under another signature context: the ledger reads only
// what the key's holder signed for it.
func TestOpenRefusesBadSignature(t *testing.T) {
	lines := splitLines(readVector(t, "allowed.jsonl"))
	pub := vectorKey()
	bad := bytes.Clone(lines[1])
	at := len(bad) - len(lineSuffix) - sigB64Len + 10
	bad[at] = map[bool]byte{true: 'B', false: 'A'}[bad[at] == 'A']
	if _, err := base64.StdEncoding.Strict().DecodeString(string(bad[len(bad)-len(lineSuffix)-sigB64Len : len(bad)-len(lineSuffix)])); err != nil {
		t.Fatalf("test bug: mangled signature is not base64: %v", err)
	}
	var msg []byte
	if _, err := Open(lines[1], pub, SignatureContext, &msg); err != nil {
		t.Fatalf("Open of a good line: %v", err)
	}
	if p, err := Open(bad, pub, SignatureContext, &msg); err == nil || p != nil {
		t.Errorf("Open of a line with a bad signature: payload %d bytes, err %v", len(p), err)
	}
	if _, err := Open(lines[1], pub, "symbi-other-v1\n", &msg); err == nil {
		t.Error("Open under another context accepted a journal line")
	}
	in := [][]byte{lines[0], bad, lines[2]}
	payloads, errs := OpenAll(in, pub, SignatureContext)
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("OpenAll of good lines: %v", errs)
	}
	if errs[1] == nil || payloads[1] != nil {
		t.Errorf("OpenAll of a line with a bad signature: payload %d bytes, err %v", len(payloads[1]), errs[1])
	}
}

// TestFileLimitBoundary: a record that would take the file one byte past its limit (the
// file limit less the closing reserve) is refused with ErrFileTooLarge; one that fills it
// exactly is not.
func TestFileLimitBoundary(t *testing.T) {
	w := newWriter(nil, "", vectorPrivateKey(), "a", "r")
	w.now = fixedClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if _, err := w.prepareAll([]Record{Started{Agent: "a"}}); err != nil {
		t.Fatal(err)
	}
	rec := InferenceRequested{CallID: "c"}
	p, err := w.Prepare(rec)
	if err != nil {
		t.Fatal(err)
	}
	limit := int64(MaxFileBytes - ClosingReserve)
	w.size = limit - int64(len(p.line))
	if _, err := w.Prepare(rec); err != nil {
		t.Errorf("a record that fills the file to its limit exactly: %v", err)
	}
	w.size++
	if _, err := w.Prepare(rec); !errors.Is(err, ErrFileTooLarge) {
		t.Errorf("a record one byte past the limit: %v, want ErrFileTooLarge", err)
	}
}

// TestCutBackKeepsLinesBeforeTerminated: "It never cuts the lines before a prepared
// terminated record". When the write of a prepared terminated record fails, the lines
// before it stay in the file and Kept is the receipt taken before it, which the ledger
// may already have named.
func TestCutBackKeepsLinesBeforeTerminated(t *testing.T) {
	_, ff, w := faultyWriter(t)
	if err := w.Append(Started{Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(InferenceRequested{CallID: "c"}); err != nil { // written, not durable
		t.Fatal(err)
	}
	before := w.Receipt()
	p, err := w.Prepare(Terminated{Reason: "audit_failed"}) // the ledger may name its receipt now
	if err != nil {
		t.Fatal(err)
	}
	ff.failWrite = true
	if err := w.AppendPrepared(p); err == nil {
		t.Fatal("the failing write succeeded")
	}
	if n := countLines(t, w.Path()); n != 2 {
		t.Errorf("the file holds %d lines after the failed terminated, want the 2 before it", n)
	}
	if k := w.Kept(); k != before {
		t.Errorf("Kept %+v, want the receipt before terminated %+v", k, before)
	}
}

// TestAppendPreparedAfterStop: spec "after one failed append (including a failed fsync)
// the writer refuses every later append" — a line prepared before the failure too.
func TestAppendPreparedAfterStop(t *testing.T) {
	_, ff, w := faultyWriter(t)
	if err := w.Append(Started{Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	p, err := w.Prepare(InferenceRequested{CallID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	ff.failSync = true
	if err := w.Sync(); !errors.Is(err, ErrStopped) {
		t.Fatalf("failed fsync: %v", err)
	}
	ff.failSync = false
	if err := w.AppendPrepared(p); !errors.Is(err, ErrStopped) {
		t.Errorf("AppendPrepared after a failed fsync: %v, want ErrStopped", err)
	}
	if n := countLines(t, w.Path()); n != 1 {
		t.Errorf("the file holds %d lines, want 1", n)
	}
}

// TestStalePreparedRefused: a line prepared before another was appended is refused with
// ErrOrder, not written as a second line of the same seq, and the journal stays valid.
func TestStalePreparedRefused(t *testing.T) {
	s, w := createJournal(t, "r-stale")
	if err := w.Append(Started{Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	p, err := w.Prepare(InferenceRequested{CallID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(InferenceRequested{CallID: "c2"}); err != nil {
		t.Fatal(err)
	}
	if err := w.AppendPrepared(p); !errors.Is(err, ErrOrder) {
		t.Errorf("a stale prepared line: %v, want ErrOrder", err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if r := Verify(w.Path(), s.PublicKey(), VerifyOptions{}); r.ExitCode() != 2 || r.Records != 2 {
		t.Errorf("journal after the refusal: exit %d records %d %v", r.ExitCode(), r.Records, r.Problems)
	}
}

// shortWriteFile writes half of each line and reports no error, as a write(2) may.
type shortWriteFile struct{ *os.File }

func (f *shortWriteFile) Write(b []byte) (int, error) { return f.File.Write(b[:len(b)/2]) }
func (f *shortWriteFile) Stat() (fs.FileInfo, error)  { return f.File.Stat() }

// TestShortWriteStops: a short write without an error is a failed append: the writer
// stops and says so, at that append and at every Sync after it, so that a partial line is
// never taken as written.
func TestShortWriteStops(t *testing.T) {
	_, root := newProject(t)
	s := openStore(t, root)
	real, err := s.Create("a", "r")
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter(&shortWriteFile{File: real.f.(*os.File)}, real.Path(), s.key, "a", "r")
	t.Cleanup(func() { w.Close() })
	if err := w.Append(Started{Agent: "a"}); !errors.Is(err, ErrStopped) {
		t.Fatalf("a short write: %v, want ErrStopped", err)
	}
	if err := w.Sync(); !errors.Is(err, ErrStopped) {
		t.Errorf("Sync after a short write: %v, want ErrStopped", err)
	}
}

// TestSyncRefusesMovedProject: "or no longer the file at the writer's path (its
// directory was removed, renamed or replaced)": the project renamed under a running
// writer stops it at its next Sync, since its lines no longer reach the journal at its
// path.
func TestSyncRefusesMovedProject(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "proj")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	root := openRoot(t, dir)
	s := openStore(t, root)
	w, err := s.Create("agent", "r-moved")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.Append(Started{Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, filepath.Join(base, "proj-moved")); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(InferenceRequested{CallID: "c"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); !errors.Is(err, ErrStopped) {
		t.Fatalf("Sync after the project was moved away from the writer's path: %v, want ErrStopped", err)
	}
}

// TestDiscardChecksIdentity: Discard removes only the writer's own file; another file
// put at its name is left, and Discard does not report success.
func TestDiscardChecksIdentity(t *testing.T) {
	_, w := createJournal(t, "r-swapped")
	if err := os.Rename(w.Path(), w.Path()+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.Path(), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := w.Discard()
	if _, serr := os.Lstat(w.Path()); serr != nil {
		t.Fatalf("Discard (%v) removed another file put at the journal's name: %v", err, serr)
	}
	if err == nil {
		t.Error("Discard removed nothing but reported success")
	}
}

// TestCutBackLeavesForeignBytes: "Bytes someone else wrote are evidence and are left" —
// the cut back after a failed fsync does not remove them.
func TestCutBackLeavesForeignBytes(t *testing.T) {
	_, ff, w := faultyWriter(t)
	if err := w.Append(Started{Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(InferenceRequested{CallID: "c"}); err != nil {
		t.Fatal(err)
	}
	appendBytes(t, w.Path(), []byte("{\"forged\":true}\n"))
	ff.failSync = true
	if err := w.Sync(); !errors.Is(err, ErrStopped) {
		t.Fatalf("failed fsync: %v", err)
	}
	if data := mustRead(t, w.Path()); !bytes.Contains(data, []byte("forged")) {
		t.Fatalf("the bytes someone else wrote were cut: %q", data)
	}
}

// TestStoreRefusesSymlinkedDirs: spec "a real directory (not a symlink)": .symbiont or
// governed as a symlink, even to a private directory, is refused with ErrUnsafeDir, so
// that the store cannot be redirected to a directory it does not own.
func TestStoreRefusesSymlinkedDirs(t *testing.T) {
	t.Run("governed", func(t *testing.T) {
		dir, root := newProject(t)
		sym := filepath.Join(dir, ".symbiont")
		if err := os.MkdirAll(filepath.Join(sym, "elsewhere"), 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chmod(sym, 0o700)
		if err := os.Symlink("elsewhere", filepath.Join(sym, "governed")); err != nil {
			t.Fatal(err)
		}
		if s, err := OpenStore(root, StoreOptions{Create: true}); !errors.Is(err, ErrUnsafeDir) {
			if s != nil {
				s.Close()
			}
			t.Fatalf("governed a symlink: %v, want ErrUnsafeDir", err)
		}
	})
	t.Run(".symbiont", func(t *testing.T) {
		dir, root := newProject(t)
		if err := os.MkdirAll(filepath.Join(dir, "real", "governed"), 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(dir, "real"), 0o700)
		if err := os.Symlink("real", filepath.Join(dir, ".symbiont")); err != nil {
			t.Fatal(err)
		}
		if s, err := OpenStore(root, StoreOptions{Create: true}); !errors.Is(err, ErrUnsafeDir) {
			if s != nil {
				s.Close()
			}
			t.Fatalf(".symbiont a symlink: %v, want ErrUnsafeDir", err)
		}
	})
}

// TestKeyOtherBitsRefused: spec "0600": a key with any permission bit for others is
// refused with ErrUnsafeKey, in the governed directory and through the override.
func TestKeyOtherBitsRefused(t *testing.T) {
	dir, root := newProject(t)
	gov := filepath.Join(dir, ".symbiont", "governed")
	if err := os.MkdirAll(gov, 0o700); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(gov, KeyFileName)
	if err := os.WriteFile(key, bytes.Repeat([]byte{7}, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(key, 0o604); err != nil {
		t.Fatal(err)
	}
	if s, err := OpenStore(root, StoreOptions{}); !errors.Is(err, ErrUnsafeKey) {
		if s != nil {
			s.Close()
		}
		t.Errorf("key mode 0604: %v, want ErrUnsafeKey", err)
	}
	other := filepath.Join(t.TempDir(), "k")
	if err := os.WriteFile(other, bytes.Repeat([]byte{7}, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(other, 0o601)
	if s, err := OpenStore(root, StoreOptions{KeyFile: other}); !errors.Is(err, ErrUnsafeKey) {
		if s != nil {
			s.Close()
		}
		t.Errorf("override key mode 0601: %v, want ErrUnsafeKey", err)
	}
}

// TestReopenEmpty: an empty journal is not continued: it has no started record and no
// chain to extend.
func TestReopenEmpty(t *testing.T) {
	s := storeWithSeed(t, bytes.Repeat([]byte{7}, 32))
	name := FileName("agent", "r-empty")
	if err := os.WriteFile(filepath.Join(s.Dir(), name), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if w, _, err := s.Reopen(name); !errors.Is(err, ErrNotResumable) {
		if w != nil {
			w.Close()
		}
		t.Fatalf("an empty journal: %v, want ErrNotResumable", err)
	}
}

// TestReopenAgentMustMatchName: a journal put under another agent's file name is not
// continued (Reopen does not run the verifier's own name check, so it checks the agent
// itself).
func TestReopenAgentMustMatchName(t *testing.T) {
	s := storeWithSeed(t, bytes.Repeat([]byte{7}, 32))
	name := heldJournal(t, s, "run-agent")
	other := FileName(agentID("someone-else"), "run-agent")
	if err := os.Rename(filepath.Join(s.Dir(), name), filepath.Join(s.Dir(), other)); err != nil {
		t.Fatal(err)
	}
	if w, _, err := s.Reopen(other); !errors.Is(err, ErrNotResumable) {
		if w != nil {
			w.Close()
		}
		t.Fatalf("a journal under another agent's name: %v, want ErrNotResumable", err)
	}
}

// TestReopenRefusesWriterAtOnce: a journal another writer holds (an exclusive lock) is
// refused at once, not waited for as a passing probe is: two writers must never append
// to one journal.
func TestReopenRefusesWriterAtOnce(t *testing.T) {
	s := storeWithSeed(t, bytes.Repeat([]byte{7}, 32))
	name := heldJournal(t, s, "run-locked")
	fd, err := unix.Open(filepath.Join(s.Dir(), name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	waited := false
	oldWait := writerLockWait
	testLockWaits, writerLockWait = func() { waited = true }, 50*time.Millisecond
	defer func() { testLockWaits, writerLockWait = nil, oldWait }()
	if w, _, err := s.Reopen(name); !errors.Is(err, ErrNotResumable) {
		if w != nil {
			w.Close()
		}
		t.Fatalf("a journal another writer holds: %v", err)
	}
	if waited {
		t.Error("Reopen waited for an exclusive lock, as for a passing probe")
	}
}

// TestReopenKeepsTheWait: a reopened journal held at a gate leaves its wait open, and
// DurableWait says so, as it does on the writer that wrote it.
func TestReopenKeepsTheWait(t *testing.T) {
	s := storeWithSeed(t, bytes.Repeat([]byte{7}, 32))
	name := heldJournal(t, s, "run-wait")
	w, _, err := s.Reopen(name)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if rc, open := w.DurableWait(); !open || rc.Records != 5 {
		t.Fatalf("DurableWait after Reopen of a held run: %+v, %v; want 5 records, a wait open", rc, open)
	}
}

// TestReopenRefusesPathName: a name whose agent part is not an id ("sub/x", a path into a
// subdirectory) is refused as a name, not opened, so that Reopen reaches only the store's
// own journals.
func TestReopenRefusesPathName(t *testing.T) {
	s := storeWithSeed(t, bytes.Repeat([]byte{7}, 32))
	if err := os.Mkdir(filepath.Join(s.Dir(), "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	w := newWriter(nil, "", s.key, "sub/x", "r1")
	w.now = fixedClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	lines, err := w.prepareAll(gatedRecords()[:5])
	if err != nil {
		t.Fatal(err)
	}
	var data []byte
	for _, p := range lines {
		data = append(data, p.line...)
	}
	name := "sub/x.r1.jsonl"
	if err := os.WriteFile(filepath.Join(s.Dir(), name), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if rw, _, err := s.Reopen(name); !errors.Is(err, ErrNotResumable) || !strings.Contains(err.Error(), "not a journal's name") {
		if rw != nil {
			rw.Close()
		}
		t.Fatalf("Reopen(%q): %v, want refused as not a journal's name", name, err)
	}
}

// TestReopenRefusesSymlink: a symlink at a journal's name is not followed, so that Reopen
// never continues a file outside the store.
func TestReopenRefusesSymlink(t *testing.T) {
	s := storeWithSeed(t, bytes.Repeat([]byte{7}, 32))
	name := heldJournal(t, s, "run-link")
	outside := filepath.Join(t.TempDir(), name)
	if err := os.Rename(filepath.Join(s.Dir(), name), outside); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(s.Dir(), name)); err != nil {
		t.Fatal(err)
	}
	if w, _, err := s.Reopen(name); !errors.Is(err, ErrNotResumable) {
		if w != nil {
			w.Close()
		}
		t.Fatalf("a symlink at the journal's name: %v, want ErrNotResumable", err)
	}
}

// TestReopenRefusesOversize: spec "a file ≤ 64 MiB": a journal over the limit, every line
// valid, is not continued.
func TestReopenRefusesOversize(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 65 MiB journal")
	}
	s := storeWithSeed(t, bytes.Repeat([]byte{7}, 32))
	w := newWriter(nil, "", s.key, "coder", "r-big")
	w.now = fixedClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	recs := []Record{delegatedRecords()[0], delegatedRecords()[1]}
	text := strings.Repeat("x", MaxRecordBytes-4096)
	for range MaxFileBytes/len(text) + 2 {
		recs = append(recs, AgentMessage{TextSHA256: sum(text), Bytes: int64(len(text)), Chunks: 1, Text: text})
	}
	path := filepath.Join(s.Dir(), FileName("coder", "r-big"))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for _, r := range recs {
		line, err := w.line(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(line); err != nil {
			t.Fatal(err)
		}
		size += len(line)
		w.seq++
		w.prev = lineHash(line)
	}
	f.Close()
	if size <= MaxFileBytes {
		t.Fatalf("test bug: %d bytes", size)
	}
	if rw, _, err := s.Reopen(FileName("coder", "r-big")); !errors.Is(err, ErrNotResumable) {
		if rw != nil {
			rw.Close()
		}
		t.Fatalf("a %d-byte journal: %v, want ErrNotResumable", size, err)
	}
}

// TestMachineRefusals: impossible stories the run's state machine must refuse: each
// story's steps are accepted up to its last, which is refused with ErrImpossible.
func TestMachineRefusals(t *testing.T) {
	started := Step{Type: TypeStarted}
	requested := Step{Type: TypeInferenceRequested, CallID: "c1"}
	finished := func(o, text string) Step {
		return Step{Type: TypeInferenceFinished, CallID: "c1", Outcome: o, TextSHA256: text}
	}
	session := Step{Type: TypeSessionStarted}
	sessionEnd := func(o, text string) Step { return Step{Type: TypeSessionFinished, Outcome: o, TextSHA256: text} }
	tests := map[string][]Step{
		"inference_requested after session_finished (no session)": {started, sessionEnd("error", ""), requested},
		"a second inference_finished":                             {started, requested, finished("completed", "t1"), finished("error", "t2")},
		"inference_finished without an outcome":                   {started, requested, finished("", "t1")},
		"a second session_finished":                               {started, session, sessionEnd("completed", "t1"), sessionEnd("completed", "t2")},
		"fs_read of an approved request with no permission_decided": {started, session,
			{Type: TypeApprovalRequested, Gate: "g", RequestID: "p1"},
			{Type: TypeApprovalDecided, RequestID: "p1", Decision: "approve"},
			{Type: TypeFSRead, RequestID: "p1"}},
		"a permission held at no gate": {started, session, {Type: TypeApprovalRequested, RequestID: "p1"}},
	}
	for name, steps := range tests {
		var m Machine
		for i, s := range steps {
			err := m.Next(s)
			if last := i == len(steps)-1; last && !errors.Is(err, ErrImpossible) {
				t.Errorf("%s: the last step was accepted (%v)", name, err)
			} else if !last && err != nil {
				t.Errorf("%s: step %d refused: %v", name, i, err)
				break
			}
		}
	}
}
