package ledger

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"symbi/internal/journal"
)

// checkpointBody is the exact body docs/ledger.md gives a checkpoint: origin, a decimal
// size without sign or leading zero, and the standard padded base64 of a 32-byte hash, one
// a line. (base64 of 32 bytes is 43 characters and one "=", the last one of AEIMQUYcgkosw048.)
var checkpointBody = regexp.MustCompile(`\A([^\n]*)\n(0|[1-9][0-9]*)\n([A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=)\n\z`)

// FuzzOpenCheckpoint: the body of a checkpoint given to `symbi audit verify --checkpoint`
// is signed here with the ledger's key (the fuzzer cannot forge a signature, so without
// signing it would never reach the body's parse), followed by arbitrary extra signature
// lines. OpenCheckpoint never panics; it refuses with ErrCheckpoint, or accepts exactly a
// body of the documented form for this ledger's origin, whose parse reproduces the body
// byte for byte (Body) and so the signed note (note.Sign is deterministic). What it
// accepts, CheckConsistent either refuses with ErrCheckpoint or finds consistent only
// when it is the root of a prefix of the tree.
func FuzzOpenCheckpoint(f *testing.F) {
	key := testKey()
	pub := key.Public().(ed25519.PublicKey)
	s, err := signer(key)
	if err != nil {
		f.Fatal(err)
	}
	var lines []Line
	w := &Writer{key: key, now: fixedNow, prev: ZeroHash}
	var data []byte
	for i := range 3 {
		line, _ := w.line(runEntry(i))
		data = append(data, line...)
		w.seq++
		w.prev = Verify(data, pub).Entries[i].Hash
	}
	lines = Verify(data, pub).Entries
	tree, err := NewTree(lines)
	if err != nil {
		f.Fatal(err)
	}
	origin := Origin(pub)
	for n := range int64(4) {
		root, _ := tree.Root(n)
		f.Add(Checkpoint{Origin: origin, Size: n, Root: root}.Body(), []byte(nil))
	}
	root2, _ := tree.Root(2)
	good := Checkpoint{Origin: origin, Size: 2, Root: root2}.Body()
	skey, _, err := note.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{7}, 64)), "other")
	if err != nil {
		f.Fatal(err)
	}
	other, err := note.NewSigner(skey)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		strings.Replace(good, "\n2\n", "\n02\n", 1),
		strings.Replace(good, "\n2\n", "\n+2\n", 1),
		strings.Replace(good, "\n2\n", "\n-0\n", 1),
		strings.Replace(good, "\n2\n", "\n9223372036854775808\n", 1),
		strings.Replace(good, "\n2\n", "\n4\n", 1),
		strings.Replace(good, "=\n", "\n", 1),
		strings.Replace(good, "=\n", "=\nextension line\n", 1),
		strings.Replace(good, origin, "symbi.ledger/0000000000000000", 1),
		strings.Replace(good, "\n2\n", "\n2\r\n", 1),
		origin + "\n0\n" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n",
		origin + "\n1\n" + base64.StdEncoding.EncodeToString(make([]byte, 33)) + "\n",
		"", "\n", origin + "\n",
	} {
		f.Add(s, []byte(nil))
	}
	if extra, err := note.Sign(&note.Note{Text: good}, other); err == nil {
		// Another key's signature line after this ledger's.
		_, sig, _ := strings.Cut(string(extra), "\n\n")
		f.Add(good, []byte(sig))
	}
	f.Add(good, []byte("— "+origin+" AAAA\n"))
	f.Add(good, []byte("not a signature\n"))

	f.Fuzz(func(t *testing.T, body string, extra []byte) {
		signed, err := note.Sign(&note.Note{Text: body}, s)
		if err != nil {
			return // not a note's text (no final newline, a blank line…): nothing to sign
		}
		msg := append(bytes.Clone(signed), extra...)
		c, err := OpenCheckpoint(msg, pub)
		m := checkpointBody.FindStringSubmatch(body)
		canonical := m != nil && m[1] == origin
		var size int64
		if canonical {
			var perr error
			size, perr = strconv.ParseInt(m[2], 10, 64)
			canonical = perr == nil
		}
		if err != nil {
			if !errors.Is(err, ErrCheckpoint) {
				t.Fatalf("body %q: refused without ErrCheckpoint: %v", body, err)
			}
			if canonical && len(extra) == 0 {
				t.Fatalf("body %q of the documented form, signed with the ledger's key, refused: %v", body, err)
			}
			return
		}
		if !canonical {
			t.Fatalf("body %q accepted as %+v: not origin, size and root hash of the documented form", body, c)
		}
		if c.Size != size || c.Origin != origin || c.Body() != body {
			t.Fatalf("body %q read as %+v, whose body is %q", body, c, c.Body())
		}
		if again, err := note.Sign(&note.Note{Text: c.Body()}, s); err != nil || !bytes.Equal(again, signed) {
			t.Fatalf("checkpoint %+v does not re-sign to the note accepted (%v)", c, err)
		}
		err = CheckConsistent(tree, c)
		want := c.Size <= tree.Size()
		if want {
			r, _ := tree.Root(c.Size)
			want = r == c.Root
		}
		switch {
		case err != nil && !errors.Is(err, ErrCheckpoint):
			t.Fatalf("CheckConsistent(%+v): %v without ErrCheckpoint", c, err)
		case (err == nil) != want:
			t.Fatalf("CheckConsistent(%+v) = %v; the tree's root of that size is the checkpoint's: %v", c, err, want)
		}
	})
}

// FuzzSignedLedgerLine: a ledger line's payload is read only after its signature
// verifies, so FuzzVerify's mutations never reach the payload's parse (checkPayload,
// checkData). Here every fuzzed payload is sealed with the ledger's key first. Whatever it
// holds, Verify never panics, verifies to the same report together and line by line, and
// an accepted line is one every reader of the format takes the same way: its payload is
// exactly the members v, seq, prev, time, type, data, strict JSON, v 1, seq 0, prev the
// zero hash, time to the millisecond, and the data of a known entry type holds a run_id
// string that is not empty — the run it is said to be about.
func FuzzSignedLedgerLine(f *testing.F) {
	key := testKey()
	pub := key.Public().(ed25519.PublicKey)
	w := &Writer{key: key, now: fixedNow, prev: ZeroHash}
	for _, r := range []Record{runEntry(0)} {
		line, _ := w.line(r)
		p, _, _ := bytes.Cut(bytes.TrimPrefix(line, []byte(`{"payload":`)), []byte(`,"signature":`))
		f.Add(p)
	}
	head := `{"v":1,"seq":0,"prev":"` + ZeroHash + `","time":"2026-01-02T03:04:05.000Z","type":`
	for _, s := range []string{
		head + `"run","data":{"run_id":"r"}}`,
		head + `"run","data":{"run_id":""}}`,
		head + `"run","data":{"RUN_ID":"r"}}`,
		head + `"run","data":{"run_id":null}}`,
		head + `"run","data":{"run_id":"r","records":1.5}}`,
		head + `"run","data":{"run_id":"r","records":"1"}}`,
		head + `"resolution","data":{"run_id":"r","resolution":"accepted"}}`,
		head + `"pruned","data":{"run_id":"r","run_id":"s"}}`,
		head + `"future","data":{"anything":[1,{"a":null}]}}`,
		head + `"","data":{}}`,
		head + `"run","data":[]}`,
		`{"v":1,"seq":0,"prev":"` + ZeroHash + `","time":"2026-01-02T03:04:05Z","type":"x","data":{}}`,
		`{"v":1,"seq":0,"prev":"` + ZeroHash + `","time":"2026-01-02T03:04:05.000Z","type":"x","data":{},"extra":1}`,
		`{"v":2}`, `{}`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	shape := regexp.MustCompile(`\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z\z`)
	f.Fuzz(func(t *testing.T, payload []byte) {
		if bytes.ContainsAny(payload, "\n") {
			return // a payload of two lines is not one line's
		}
		line := journal.Seal(key, Context, payload)
		rep := verifyBoth(t, "fuzzed", line, pub)
		if len(rep.Problems) > 0 {
			return
		}
		if len(rep.Entries) != 1 {
			t.Fatalf("%q: %d entries of one line", payload, len(rep.Entries))
		}
		m, err := journal.PayloadMembers(payload, members)
		if err != nil {
			t.Fatalf("%q accepted, but its payload is not the strict envelope: %v", payload, err)
		}
		var typ, tm string
		if !jsonStr(m["type"], &typ) || !jsonStr(m["time"], &tm) || string(m["v"]) != "1" || string(m["seq"]) != "0" ||
			!shape.MatchString(tm) || typ == "" || typ != rep.Entries[0].Type {
			t.Fatalf("%q accepted as %+v", payload, rep.Entries[0])
		}
		var prev string
		if !jsonStr(m["prev"], &prev) || prev != ZeroHash {
			t.Fatalf("%q accepted with prev %s", payload, m["prev"])
		}
		if _, known := entryTypes[typ]; known {
			d, _, err := decodeObject(m["data"])
			var id string
			if err != nil || !jsonStr(d["run_id"], &id) || id == "" {
				t.Fatalf("%q: a %s entry accepted without a run_id string (%v)", payload, typ, err)
			}
			if got := rep.Entries[0].RunID(); (typ == TypeRun || typ == TypeRecovered || typ == TypePruned) && got != id {
				t.Fatalf("%q: entry about run %q, its data says %q", payload, got, id)
			}
		}
	})
}

// jsonStr reads raw as a JSON string, as encoding/json does.
func jsonStr(raw []byte, dst *string) bool {
	return len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, dst) == nil
}

// decodeObject reads raw as a JSON object's members.
func decodeObject(raw []byte) (map[string]json.RawMessage, bool, error) {
	var m map[string]json.RawMessage
	err := json.Unmarshal(raw, &m)
	return m, m != nil, err
}
