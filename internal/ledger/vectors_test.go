package ledger

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/ledger from the fixed seed")

// vectorDir holds the published ledger vectors.
const vectorDir = "../../testdata/ledger"

// vectorExpected is expected.json.
type vectorExpected struct {
	Seed        string       `json:"seed"`
	PublicKey   string       `json:"public_key"`
	VerifierKey string       `json:"note_verifier_key"`
	Origin      string       `json:"origin"`
	Size        int          `json:"size"`
	Root        string       `json:"root"`
	Context     string       `json:"signature_context"`
	Cases       []vectorCase `json:"cases"`
}

type vectorCase struct {
	File        string `json:"file"`
	Entries     int    `json:"entries"`      // lines that verify
	ProblemLine int    `json:"problem_line"` // 0: none
	Consistent  bool   `json:"consistent_with_checkpoint"`
	Description string `json:"description"`
}

// buildVectors writes a ledger with the vector key and a fixed clock, and derives the
// tampered ones. The generation is deterministic (Ed25519 signatures are).
func buildVectors(t *testing.T) (map[string][]byte, vectorExpected) {
	key := testKey()
	pub := key.Public().(ed25519.PublicKey)
	dir, root := newRoot(t)
	w := openWriter(t, root)
	n := 0
	w.now = func() time.Time {
		n++
		return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(n) * 7 * time.Millisecond)
	}
	head := strings.Repeat("ab", 32)
	for _, r := range []Record{
		Run{RunID: "0b7e8a52-6f1d-4c3a-9e2b-5d4c3b2a1f00", AgentID: "5ea0897b-c36e-5f04-bdd0-fc151f6172eb", Agent: "greeter", File: "5ea0897b-c36e-5f04-bdd0-fc151f6172eb.0b7e8a52-6f1d-4c3a-9e2b-5d4c3b2a1f00.jsonl", Reason: "completed", Released: true, Records: 5, Head: head, PrevHead: strings.Repeat("cd", 32), Caller: "stdio"},
		Recovered{RunID: "2d9a0c74-8b3f-4e5c-9a4d-7f6e5d4c3b22", AgentID: "c3fefa02-b4f4-5422-9997-6bc5ad8e70db", File: "c3fefa02-b4f4-5422-9997-6bc5ad8e70db.2d9a0c74-8b3f-4e5c-9a4d-7f6e5d4c3b22.jsonl", State: "incomplete", Records: 3, Head: head},
		Resolution{RunID: "0b7e8a52-6f1d-4c3a-9e2b-5d4c3b2a1f00", Resolution: "accepted", Note: "looks right", Caller: "stdio"},
		Pruned{RunID: "2d9a0c74-8b3f-4e5c-9a4d-7f6e5d4c3b22", File: "c3fefa02-b4f4-5422-9997-6bc5ad8e70db.2d9a0c74-8b3f-4e5c-9a4d-7f6e5d4c3b22.jsonl", Records: 3, Head: head},
	} {
		if _, err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	data := ledgerBytes(t, dir)
	entries := Verify(data, pub).Entries
	tree, err := NewTree(entries)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := SignCheckpoint(tree, key)
	if err != nil {
		t.Fatal(err)
	}
	rootHash, _ := tree.Root(tree.Size())
	ls := bytes.SplitAfter(data, []byte("\n"))[:4]
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	files := map[string][]byte{
		"ledger.jsonl":    data,
		"checkpoint.txt":  cp,
		"deleted.jsonl":   join(ls[0], ls[2], ls[3]),
		"reordered.jsonl": join(ls[1], ls[0], ls[2], ls[3]),
		"edited.jsonl":    bytes.Replace(data, []byte(`"accepted"`), []byte(`"rejected"`), 1),
		"truncated.jsonl": join(ls[0], ls[1]),
	}
	vkey, _ := VerifierKey(pub)
	exp := vectorExpected{
		Seed: "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", PublicKey: hexOf(pub), VerifierKey: vkey,
		Origin: Origin(pub), Size: len(entries), Root: base64.StdEncoding.EncodeToString(rootHash[:]), Context: Context,
		Cases: []vectorCase{
			{File: "ledger.jsonl", Entries: 4, Consistent: true, Description: "run, recovered, resolution and pruned entries; checkpoint.txt signs it"},
			{File: "deleted.jsonl", Entries: 1, ProblemLine: 2, Description: "line 2 deleted: the chain breaks there"},
			{File: "reordered.jsonl", Entries: 0, ProblemLine: 1, Description: "lines 1 and 2 swapped"},
			{File: "edited.jsonl", Entries: 2, ProblemLine: 3, Description: "the resolution of line 3 edited: its signature fails"},
			{File: "truncated.jsonl", Entries: 2, Description: "cut after line 2: valid alone, inconsistent with the checkpoint"},
		},
	}
	return files, exp
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// TestVectors regenerates the vectors, compares them with testdata/ledger (rewritten with
// -update), and checks each case against the verifier and the checkpoint.
func TestVectors(t *testing.T) {
	files, exp := buildVectors(t)
	raw, _ := json.MarshalIndent(exp, "", "  ")
	files["expected.json"] = append(raw, '\n')
	for name, want := range files {
		path := filepath.Join(vectorDir, name)
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./internal/ledger -run TestVectors -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the regenerated vector (run with -update if the change is deliberate)", name)
		}
	}
	pub := testKey().Public().(ed25519.PublicKey)
	cp, err := OpenCheckpoint(files["checkpoint.txt"], pub)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range exp.Cases {
		rep := Verify(files[c.File], pub)
		line := 0
		if len(rep.Problems) > 0 {
			line = rep.Problems[0].Line
		}
		if len(rep.Entries) != c.Entries || line != c.ProblemLine {
			t.Errorf("%s: %d entries, problem at line %d; want %d, %d", c.File, len(rep.Entries), line, c.Entries, c.ProblemLine)
		}
		if c.ProblemLine == 0 {
			tree, _ := NewTree(rep.Entries)
			if consistent := CheckConsistent(tree, cp) == nil; consistent != c.Consistent {
				t.Errorf("%s: consistent with the checkpoint %v, want %v", c.File, consistent, c.Consistent)
			}
		}
	}
}
