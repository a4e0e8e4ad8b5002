package ledger

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
	"golang.org/x/sys/unix"
)

// testKey is the RFC 8032 test 1 key.
func testKey() ed25519.PrivateKey {
	seed, _ := hex.DecodeString("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
	return ed25519.NewKeyFromSeed(seed)
}

// newRoot returns a project directory with .symbiont and its descriptor.
func newRoot(t *testing.T) (string, *os.File) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, ".symbiont"), 0o700); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return dir, root
}

func openWriter(t *testing.T, root *os.File) *Writer {
	t.Helper()
	w, err := Open(root, testKey())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func runEntry(i int) Run {
	return Run{RunID: fmt.Sprintf("run-%d", i), AgentID: "agent", Agent: "helper", File: fmt.Sprintf("agent.run-%d.jsonl", i),
		Reason: "completed", Released: true, Records: 5, Head: strings.Repeat("a", 64), Caller: "stdio"}
}

func ledgerBytes(t *testing.T, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ".symbiont", FileName))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWriterGroupCommit: concurrent appenders each return once their line is durable;
// the ledger verifies, every entry is there once, and a reopened writer continues the
// chain.
func TestWriterGroupCommit(t *testing.T) {
	dir, root := newRoot(t)
	w := openWriter(t, root)
	const n = 64
	var wg sync.WaitGroup
	seqs := make([]int64, n)
	for i := range n {
		wg.Go(func() {
			e, err := w.Append(runEntry(i))
			if err != nil {
				t.Error(err)
			}
			seqs[i] = e.Seq
		})
	}
	wg.Wait()
	if w.Size() != n {
		t.Fatalf("size %d, want %d", w.Size(), n)
	}
	rep := Verify(ledgerBytes(t, dir), testKey().Public().(ed25519.PublicKey))
	if len(rep.Problems) != 0 || len(rep.Entries) != n {
		t.Fatalf("%d entries, problems %v", len(rep.Entries), rep.Problems)
	}
	seen := map[int64]bool{}
	for _, s := range seqs {
		seen[s] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct seqs for %d appends", len(seen), n)
	}
	w.Close()
	w2 := openWriter(t, root)
	if _, err := w2.Append(Resolution{RunID: "run-1", Resolution: "accepted", Caller: "stdio"}); err != nil {
		t.Fatal(err)
	}
	if rep := Verify(ledgerBytes(t, dir), testKey().Public().(ed25519.PublicKey)); len(rep.Problems) != 0 || len(rep.Entries) != n+1 {
		t.Fatalf("after reopening: %d entries, problems %v", len(rep.Entries), rep.Problems)
	}
}

// TestOpenCutsTornLine: a line cut by a crash before its fsync was never acknowledged;
// reopening cuts it off and continues from the last whole line.
func TestOpenCutsTornLine(t *testing.T) {
	dir, root := newRoot(t)
	w := openWriter(t, root)
	for i := range 3 {
		if _, err := w.Append(runEntry(i)); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	path := filepath.Join(dir, ".symbiont", FileName)
	whole := ledgerBytes(t, dir)
	if err := os.WriteFile(path, append(bytes.Clone(whole), `{"payload":{"v":1,"se`...), 0o600); err != nil {
		t.Fatal(err)
	}
	w2 := openWriter(t, root)
	if _, err := w2.Append(runEntry(3)); err != nil {
		t.Fatal(err)
	}
	rep := Verify(ledgerBytes(t, dir), testKey().Public().(ed25519.PublicKey))
	if len(rep.Problems) != 0 || len(rep.Entries) != 4 || rep.TailBytes != 0 {
		t.Fatalf("%d entries, tail %d, problems %v", len(rep.Entries), rep.TailBytes, rep.Problems)
	}
}

// TestOpenRefuses: a ledger that is not whole, or not the server's own file, is not
// continued.
func TestOpenRefuses(t *testing.T) {
	dir, root := newRoot(t)
	w := openWriter(t, root)
	for i := range 2 {
		w.Append(runEntry(i))
	}
	w.Close()
	path := filepath.Join(dir, ".symbiont", FileName)
	good := ledgerBytes(t, dir)
	bad := bytes.Replace(good, []byte(`"run-1"`), []byte(`"run-X"`), 1)
	os.WriteFile(path, bad, 0o600)
	if _, err := Open(root, testKey()); err == nil || !strings.Contains(err.Error(), "cannot continue an invalid ledger") {
		t.Errorf("an edited ledger: %v", err)
	}
	os.WriteFile(path, good, 0o600)
	os.Link(path, path+".copy")
	if _, err := Open(root, testKey()); err == nil || !strings.Contains(err.Error(), "links") {
		t.Errorf("a hard-linked ledger: %v", err)
	}
	os.Remove(path + ".copy")
	os.Remove(path)
	os.Symlink("/etc/passwd", path)
	if _, err := Open(root, testKey()); err == nil {
		t.Error("a symlinked ledger was opened")
	}
}

// sample writes n run entries and returns the ledger bytes.
func sample(t *testing.T, n int) []byte {
	t.Helper()
	dir, root := newRoot(t)
	w := openWriter(t, root)
	for i := range n {
		if _, err := w.Append(runEntry(i)); err != nil {
			t.Fatal(err)
		}
	}
	return ledgerBytes(t, dir)
}

func lines(b []byte) [][]byte {
	return bytes.SplitAfter(bytes.TrimSuffix(b, nil), []byte("\n"))[:bytes.Count(b, []byte("\n"))]
}

// TestVerifyThreats: a ledger line deleted, edited or moved breaks the chain at that line.
func TestVerifyThreats(t *testing.T) {
	pub := testKey().Public().(ed25519.PublicKey)
	good := sample(t, 4)
	ls := lines(good)
	for _, tt := range []struct {
		name string
		data []byte
		line int
	}{
		{"line deleted", bytes.Join([][]byte{ls[0], ls[1], ls[3]}, nil), 3},
		{"lines reordered", bytes.Join([][]byte{ls[0], ls[2], ls[1], ls[3]}, nil), 2},
		{"line edited", bytes.Replace(good, []byte(`"run-2"`), []byte(`"run-9"`), 1), 3},
		{"first line replaced by another's", bytes.Join([][]byte{ls[1], ls[2]}, nil), 1},
		{"a journal line in the ledger", append(bytes.Clone(ls[0]), []byte(`{"payload":{},"signature":"`+strings.Repeat("A", 86)+`=="}`+"\n")...), 2},
	} {
		rep := Verify(tt.data, pub)
		if len(rep.Problems) == 0 || rep.Problems[0].Line != tt.line {
			t.Errorf("%s: problems %v, want one at line %d", tt.name, rep.Problems, tt.line)
		}
	}
	if rep := Verify(good, pub); len(rep.Problems) != 0 || len(rep.Entries) != 4 {
		t.Errorf("the original: %v", rep.Problems)
	}
}

// TestMangleEveryByte: every flipped byte of a ledger is refused (or, in a torn tail, not
// trusted): no change leaves the same verified entries.
func TestMangleEveryByte(t *testing.T) {
	pub := testKey().Public().(ed25519.PublicKey)
	good := sample(t, 3)
	orig := Verify(good, pub)
	buf := bytes.Clone(good)
	for i := range buf {
		for _, m := range []byte{0x01, 0x80} {
			buf[i] ^= m
			rep := Verify(buf, pub)
			if len(rep.Problems) == 0 && len(rep.Entries) == len(orig.Entries) && rep.TailBytes == 0 {
				t.Errorf("byte %d ^ %#x: still %d valid entries", i, m, len(rep.Entries))
			}
			buf[i] ^= m
		}
	}
}

// TestCheckpoints: a checkpoint verifies with stock note tooling; a ledger that grew is
// consistent with it; one truncated, or rewritten from scratch with the same key, is not.
func TestCheckpoints(t *testing.T) {
	key := testKey()
	pub := key.Public().(ed25519.PublicKey)
	data := sample(t, 5)
	tree, err := NewTree(Verify(data, pub).Entries)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := SignCheckpoint(tree, key)
	if err != nil {
		t.Fatal(err)
	}
	// Stock tooling: the verifier key and note.Open.
	vkey, _ := VerifierKey(pub)
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	n, err := note.Open(signed, note.VerifierList(v))
	if err != nil || !strings.HasPrefix(n.Text, Origin(pub)+"\n5\n") {
		t.Fatalf("note.Open: %v, text %q", err, n.Text)
	}
	cp, err := OpenCheckpoint(signed, pub)
	if err != nil || cp.Size != 5 {
		t.Fatalf("OpenCheckpoint: %+v, %v", cp, err)
	}
	// The same ledger, grown.
	dir, root := newRoot(t)
	os.WriteFile(filepath.Join(dir, ".symbiont", FileName), data, 0o600)
	w := openWriter(t, root)
	for i := 5; i < 9; i++ {
		w.Append(runEntry(i))
	}
	grown, _ := NewTree(Verify(ledgerBytes(t, dir), pub).Entries)
	if err := CheckConsistent(grown, cp); err != nil {
		t.Errorf("a grown ledger: %v", err)
	}
	// Truncated: fewer lines than the checkpoint signed.
	short, _ := NewTree(Verify(data, pub).Entries[:3])
	if err := CheckConsistent(short, cp); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("a truncated ledger: %v", err)
	}
	// Rewritten from scratch with the project key: valid on its own, caught by the checkpoint.
	rewritten := sample(t, 6) // other times, so other lines
	rt, _ := NewTree(Verify(rewritten, pub).Entries)
	if err := CheckConsistent(rt, cp); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), "rewritten") {
		t.Errorf("a rewritten ledger: %v", err)
	}
	// A mangled or foreign checkpoint is refused.
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	foreign, _ := SignCheckpoint(tree, other)
	for name, msg := range map[string][]byte{
		"other key": foreign,
		"edited":    bytes.Replace(signed, []byte("\n5\n"), []byte("\n6\n"), 1),
	} {
		if _, err := OpenCheckpoint(msg, pub); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("%s checkpoint: %v", name, err)
		}
	}
}

// TestCheckpointEveryByte: every byte of a signed checkpoint counts: each flipped (low
// bit, high bit), and each character of the signature's base64 replaced by every other —
// the spare bits of the last one before "=", which a lenient decoder ignores, included —
// is refused.
func TestCheckpointEveryByte(t *testing.T) {
	key := testKey()
	pub := key.Public().(ed25519.PublicKey)
	tree, err := NewTree(Verify(sample(t, 3), pub).Entries)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := SignCheckpoint(tree, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenCheckpoint(signed, pub); err != nil {
		t.Fatal(err)
	}
	buf := bytes.Clone(signed)
	try := func(i int, orig byte) {
		if _, err := OpenCheckpoint(buf, pub); err == nil {
			t.Errorf("byte %d %q -> %q: the mangled checkpoint verified", i, orig, buf[i])
		}
	}
	sigLine := bytes.LastIndexByte(buf[:len(buf)-1], ' ') + 1
	for i := range buf {
		orig := buf[i]
		for _, m := range []byte{1, 0x80} {
			buf[i] = orig ^ m
			try(i, orig)
		}
		if i >= sigLine && i < len(buf)-1 && orig != '=' {
			for _, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") {
				if c != orig {
					buf[i] = c
					try(i, orig)
				}
			}
		}
		buf[i] = orig
	}
}

// TestProofs: every line has an inclusion proof in every tree that holds it, checked
// against the signed checkpoint of that tree; an edited leaf fails, and so does the
// proof against the checkpoint of another size.
func TestProofs(t *testing.T) {
	key := testKey()
	pub := key.Public().(ed25519.PublicKey)
	entries := Verify(sample(t, 7), pub).Entries
	tree, _ := NewTree(entries)
	for n := int64(1); n <= 7; n++ {
		sub, _ := NewTree(entries[:n])
		cp, err := SignCheckpoint(sub, key)
		if err != nil {
			t.Fatal(err)
		}
		current, _ := SignCheckpoint(tree, key)
		for i := range n {
			p, err := Prove(tree, entries, i, n)
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckProof(p, cp, pub); err != nil {
				t.Errorf("proof of %d in %d: %v", i, n, err)
			}
			if err := CheckProof(p, current, pub); (err == nil) != (n == 7) || err != nil && !errors.Is(err, ErrProof) {
				t.Errorf("proof of %d in %d against the checkpoint of 7: %v", i, n, err)
			}
			p.Leaf += " "
			if err := CheckProof(p, cp, pub); !errors.Is(err, ErrProof) {
				t.Errorf("a proof of an edited leaf %d in %d: %v", i, n, err)
			}
		}
	}
	if _, err := Prove(tree, entries, 7, 7); err == nil {
		t.Error("a proof of a line past the tree")
	}
	// A proof with its size changed, or one made up without the key (any leaf, its own
	// hash as the root, size 1), does not verify against a signed checkpoint.
	p, _ := Prove(tree, entries, 0, 3)
	sub, _ := NewTree(entries[:3])
	cp3, _ := SignCheckpoint(sub, key)
	p.Size = 4
	if err := CheckProof(p, cp3, pub); !errors.Is(err, ErrProof) {
		t.Errorf("a proof of size 3 said to be of 4: %v", err)
	}
	forgedLeaf := `{"payload":{"v":1},"signature":"forged"}`
	forged := &Proof{Index: 0, Leaf: forgedLeaf, Size: 1, Root: tlog.RecordHash([]byte(forgedLeaf))}
	cp1tree, _ := NewTree(entries[:1])
	cp1, _ := SignCheckpoint(cp1tree, key)
	if err := CheckProof(forged, cp1, pub); !errors.Is(err, ErrProof) {
		t.Errorf("a proof made up without the key: %v", err)
	}
	forged.Root = tlog.RecordHash(entries[0].Leaf)
	forged.Leaf = string(entries[1].Leaf) // a signed line, at another index
	if err := CheckProof(forged, cp1, pub); !errors.Is(err, ErrProof) {
		t.Errorf("a signed line proven at another index: %v", err)
	}
}

// FuzzVerify: arbitrary ledger bytes never panic the verifier, verify to the same report
// together and line by line, and only the genuine sample verifies whole.
func FuzzVerify(f *testing.F) {
	key := testKey()
	pub := key.Public().(ed25519.PublicKey)
	w := &Writer{key: key, now: fixedNow, prev: ZeroHash}
	var genuine []byte
	for i := range 3 {
		line, _ := w.line(runEntry(i))
		genuine = append(genuine, line...)
		w.seq++
		w.prev = Verify(genuine, pub).Entries[i].Hash
	}
	f.Add(genuine)
	f.Add(genuine[:len(genuine)/2])
	f.Add([]byte("{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rep := verifyBoth(t, "fuzzed", data, pub)
		if len(rep.Problems) == 0 && rep.TailBytes == 0 && len(rep.Entries) == 3 && !bytes.Equal(data, genuine) {
			t.Fatalf("forged ledger verified: %q", data)
		}
	})
}

func fixedNow() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }

// TestTwoWriters: two writers on one ledger (two servers on one project, or a prune
// beside a server) append in turn under the file lock; the chain stays whole.
func TestTwoWriters(t *testing.T) {
	dir, root := newRoot(t)
	a, b := openWriter(t, root), openWriter(t, root)
	var wg sync.WaitGroup
	for i := range 40 {
		w := a
		if i%2 == 1 {
			w = b
		}
		wg.Go(func() {
			if _, err := w.Append(runEntry(i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// Each writer takes in the other's lines at its next append.
	if _, err := a.Append(runEntry(40)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(runEntry(41)); err != nil {
		t.Fatal(err)
	}
	rep := Verify(ledgerBytes(t, dir), testKey().Public().(ed25519.PublicKey))
	if len(rep.Problems) != 0 || len(rep.Entries) != 42 {
		t.Fatalf("%d entries, problems %v", len(rep.Entries), rep.Problems)
	}
	for i := range 42 {
		if id := fmt.Sprintf("run-%d", i); (i < 41 && !a.Knows(id)) || !b.Knows(id) {
			t.Errorf("a writer does not know %s, which the other appended", id)
		}
	}
}

// TestTakeOpened: a Writer hands over the lines it verified at Open — those Verify finds,
// the file's size and identity — with a Reader that continues the chain, once; lines
// appended later, and a ledger of more lines than a signature batch, are not in it.
func TestTakeOpened(t *testing.T) {
	for _, n := range []int{0, 3, 300} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			dir, root := newRoot(t)
			w := openWriter(t, root)
			for i := range n {
				if _, err := w.Append(runEntry(i)); err != nil {
					t.Fatal(err)
				}
			}
			// The first Writer opened an empty ledger: the lines it appended are not "opened".
			if o := w.TakeOpened(); o == nil || len(o.Lines) != 0 || o.Size != 0 {
				t.Fatalf("first writer's opened: %+v", o)
			}
			w.Close()
			w2 := openWriter(t, root)
			o := w2.TakeOpened()
			if o == nil {
				t.Fatal("TakeOpened: nil")
			}
			if w2.TakeOpened() != nil {
				t.Fatal("TakeOpened a second time: not nil")
			}
			data := ledgerBytes(t, dir)
			want := Verify(data, testKey().Public().(ed25519.PublicKey))
			if len(o.Lines) != n || len(want.Entries) != n || o.Size != int64(len(data)) {
				t.Fatalf("%d lines, %d bytes; want %d lines, %d bytes", len(o.Lines), o.Size, n, len(data))
			}
			for i := range o.Lines {
				g, v := o.Lines[i], want.Entries[i]
				if g.Seq != v.Seq || g.Type != v.Type || g.Hash != v.Hash || !bytes.Equal(g.Data, v.Data) || !bytes.Equal(g.Leaf, v.Leaf) || !g.Time.Equal(v.Time) {
					t.Fatalf("line %d: %+v, want %+v", i, g, v)
				}
			}
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(dir, ".symbiont", FileName), &st); err != nil {
				t.Fatal(err)
			}
			if o.FileID != [2]uint64{uint64(st.Dev), st.Ino} || !w2.PublicKey().Equal(testKey().Public()) {
				t.Fatalf("file id %v, key %x", o.FileID, w2.PublicKey())
			}
			if _, err := w2.Append(Resolution{RunID: "run-1", Resolution: "accepted", Caller: "stdio"}); err != nil {
				t.Fatal(err)
			}
			next := ledgerBytes(t, dir)[o.Size:]
			l, err := o.Reader.Next(next)
			if err != nil || l.Seq != int64(n) || l.Type != TypeResolution {
				t.Fatalf("the Reader on the next line: %+v, %v", l, err)
			}
			// The Reader refuses a line that does not continue the chain.
			if n > 0 {
				if _, err := o.Reader.Next(data[:len(o.Lines[0].Leaf)+1]); err == nil {
					t.Fatal("the Reader took line 0 again")
				}
			}
		})
	}
}
