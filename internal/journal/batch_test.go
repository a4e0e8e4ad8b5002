package journal

import (
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/oasisprotocol/curve25519-voi/curve"
	"github.com/oasisprotocol/curve25519-voi/curve/scalar"
	voi "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"

	"symbi/internal/strictjson"
)

// batchAll is checkBatched with batches of any size, so that a test reaches the batch
// path with a handful of signatures.
func batchAll(pub ed25519.PublicKey, context string, payloads, sigs [][]byte) []bool {
	return checkBatchedFrom(pub, context, payloads, sigs, 1)
}

// edVector is one edge-case signature of testdata/ed25519.
type edVector struct {
	name           string
	pub, msg, sig  []byte
	flags          []string
	stdlibAccepted bool
}

func readGzipJSON(t *testing.T, name string, v any) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "ed25519", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(zr).Decode(v); err != nil {
		t.Fatal(err)
	}
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// edVectors returns the vectors of testdata/ed25519, each with the standard library's
// verdict.
func edVectors(t *testing.T) []edVector {
	var vs []struct {
		A, R, S, M string
		Flags      []string
	}
	readGzipJSON(t, "ed25519vectors.json.gz", &vs)
	var out []edVector
	for i, v := range vs {
		out = append(out, edVector{name: fmt.Sprintf("ed25519vectors %d", i), pub: unhex(t, v.A), msg: []byte(v.M),
			sig: append(unhex(t, v.R), unhex(t, v.S)...), flags: v.Flags})
	}
	var sc []struct {
		Message   string `json:"message"`
		PubKey    string `json:"pub_key"`
		Signature string `json:"signature"`
	}
	readGzipJSON(t, "speccheck_cases.json.gz", &sc)
	for i, v := range sc {
		out = append(out, edVector{name: fmt.Sprintf("speccheck %d", i), pub: unhex(t, v.PubKey), msg: unhex(t, v.Message), sig: unhex(t, v.Signature)})
	}
	if len(out) != 780 {
		t.Fatalf("%d vectors, want 780", len(out))
	}
	for i := range out {
		out[i].stdlibAccepted = ed25519.Verify(out[i].pub, out[i].msg, out[i].sig)
	}
	return out
}

// equationOnly is voi's batch equation alone, with batchOptions: what a batch would
// accept without the torsion checks.
func equationOnly(pub, msg, sig []byte) bool {
	v := voi.NewBatchVerifier()
	v.AddWithOptions(voi.PublicKey(pub), msg, sig, batchOptions)
	return v.VerifyBatchOnly(rand.Reader)
}

// TestBatchEdgeVectors runs every edge-case vector through the batched check, alone and
// with every other vector of its key, and requires crypto/ed25519.Verify's verdict. The
// batch path alone (no fallback) must never accept what the standard library refuses,
// and the test must reach the cases where the batch equation alone would.
func TestBatchEdgeVectors(t *testing.T) {
	vecs := edVectors(t)
	byKey := map[string][]edVector{}
	var keys []string
	equationGap, torsionRefused, batchAccepted := 0, 0, 0
	for _, v := range vecs {
		if got := batchAll(v.pub, "", [][]byte{v.msg}, [][]byte{v.sig})[0]; got != v.stdlibAccepted {
			t.Errorf("%s %v: batched %v, crypto/ed25519 %v", v.name, v.flags, got, v.stdlibAccepted)
		}
		key, keyOK := batchKey(v.pub)
		passes := keyOK && batchPasses(key, "", [][]byte{v.msg}, [][]byte{v.sig})
		switch {
		case passes && !v.stdlibAccepted:
			t.Errorf("%s %v: the batch path accepts what crypto/ed25519 refuses", v.name, v.flags)
		case passes:
			batchAccepted++
		}
		if !v.stdlibAccepted && equationOnly(v.pub, v.msg, v.sig) {
			equationGap++
			if keyOK {
				torsionRefused++ // the key is torsion-free: the checks of R refused it
			}
		}
		if byKey[string(v.pub)] == nil {
			keys = append(keys, string(v.pub))
		}
		byKey[string(v.pub)] = append(byKey[string(v.pub)], v)
	}
	for _, k := range keys {
		group := byKey[k]
		var msgs, sigs [][]byte
		for _, v := range group {
			msgs, sigs = append(msgs, v.msg), append(sigs, v.sig)
		}
		got := batchAll(ed25519.PublicKey(k), "", msgs, sigs)
		for i, v := range group {
			if got[i] != v.stdlibAccepted {
				t.Errorf("%s in a batch of %d: batched %v, crypto/ed25519 %v", v.name, len(group), got[i], v.stdlibAccepted)
			}
		}
	}
	t.Logf("%d vectors, %d keys: %d accepted by the batch path; %d the batch equation alone accepts and crypto/ed25519 refuses, %d of them under a torsion-free key",
		len(vecs), len(keys), batchAccepted, equationGap, torsionRefused)
	if batchAccepted == 0 || equationGap == 0 || torsionRefused == 0 {
		t.Error("the vectors no longer reach the batch path, or the cofactored equation's gap, or the torsion checks of R")
	}
}

// mixedOrderSig signs message like ed25519.Sign with the key of seed, but with R
// carrying the small-order component tor: R = [r]B + tor. The cofactored batch equation
// accepts it; crypto/ed25519 refuses it unless tor is the identity.
func mixedOrderSig(t *testing.T, seed, message []byte, tor *curve.EdwardsPoint) []byte {
	t.Helper()
	h := sha512.Sum512(seed)
	h[0] &= 248
	h[31] &= 127
	h[31] |= 64
	a, err := scalar.NewFromBytesModOrder(h[:32])
	if err != nil {
		t.Fatal(err)
	}
	var wide [64]byte
	rand.Read(wide[:])
	r, err := scalar.NewFromBytesModOrderWide(wide[:])
	if err != nil {
		t.Fatal(err)
	}
	var R curve.EdwardsPoint
	R.MulBasepoint(curve.ED25519_BASEPOINT_TABLE, r)
	R.Add(&R, tor)
	var rc curve.CompressedEdwardsY
	rc.SetEdwardsPoint(&R)
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	kh := sha512.New()
	kh.Write(rc[:])
	kh.Write(pub)
	kh.Write(message)
	k, err := scalar.NewFromBytesModOrderWide(kh.Sum(nil))
	if err != nil {
		t.Fatal(err)
	}
	s := scalar.New().Mul(k, a)
	s.Add(s, r)
	sig := make([]byte, 64)
	copy(sig, rc[:])
	if err := s.ToBytes(sig[32:]); err != nil {
		t.Fatal(err)
	}
	return sig
}

// TestBatchRefusesMixedOrderR: a journal line signed by the key's holder with a
// mixed-order R (each of the seven small-order components, the order-2 one included)
// passes the cofactored batch equation but not crypto/ed25519; the batched verifier
// refuses it, alone and among 300 genuine lines, and reports it exactly as the one at
// a time verifier does.
func TestBatchRefusesMixedOrderR(t *testing.T) {
	seed, _ := hex.DecodeString(vectorSeed)
	pub := vectorKey()
	data := forge(ed25519.NewKeyFromSeed(seed), "coder", delegatedRun, longRun(300))
	lines := splitLines(data)
	for i, tor := range curve.EIGHT_TORSION {
		p, _, err := splitLine(lines[150])
		if err != nil {
			t.Fatal(err)
		}
		sig := mixedOrderSig(t, seed, signedMessage(p), tor)
		stdlib := ed25519.Verify(pub, signedMessage(p), sig)
		if stdlib != (i == 0) {
			t.Fatalf("torsion %d: crypto/ed25519 says %v", i, stdlib)
		}
		if i == 0 {
			continue // the crafting is right: with no torsion, a genuine signature
		}
		if !equationOnly(pub, signedMessage(p), sig) {
			t.Fatalf("torsion %d: the batch equation alone refuses it; the test proves nothing", i)
		}
		if batchAll(pub, SignatureContext, [][]byte{p}, [][]byte{sig})[0] {
			t.Errorf("torsion %d: the batched check accepts a signature crypto/ed25519 refuses", i)
		}
		line := []byte(linePrefix + string(p) + sigPrefix + base64.StdEncoding.EncodeToString(sig) + lineSuffix)
		bad := joinLines(append(append(append([][]byte{}, lines[:150]...), line), lines[151:]...)...)
		each, batched := &Report{Problems: []Problem{}}, &Report{Problems: []Problem{}}
		verifyDataWith(each, bad, pub, VerifyOptions{}, checkEach)
		verifyDataWith(batched, bad, pub, VerifyOptions{}, checkBatched)
		if reportJSON(each) != reportJSON(batched) || !strings.Contains(reportJSON(batched), `{"line":151,"message":"signature does not verify with the public key"}`) {
			t.Errorf("torsion %d:\none at a time %s\nbatched      %s", i, reportJSON(each), reportJSON(batched))
		}
	}
}

// TestTorsionFree: [L]P is the identity exactly for the points of the prime-order
// subgroup, as voi's constant-time IsTorsionFree says.
func TestTorsionFree(t *testing.T) {
	var wide [64]byte
	for range 4 {
		rand.Read(wide[:])
		r, _ := scalar.NewFromBytesModOrderWide(wide[:])
		var q curve.EdwardsPoint
		q.MulBasepoint(curve.ED25519_BASEPOINT_TABLE, r)
		for i, tor := range curve.EIGHT_TORSION {
			var p curve.EdwardsPoint
			p.Add(&q, tor)
			if got := torsionFree(&p); got != (i == 0) || got != p.IsTorsionFree() {
				t.Errorf("[r]B + torsion %d: torsionFree %v, IsTorsionFree %v", i, got, p.IsTorsionFree())
			}
			if got := torsionFree(tor); got != (i == 0) {
				t.Errorf("torsion %d alone: torsionFree %v", i, got)
			}
		}
	}
}

// TestBatchMixed: a batch of genuine signatures with a few bad ones (another key's, an
// edited message, a signature of the wrong line) gets each verdict right.
func TestBatchMixed(t *testing.T) {
	seed, _ := hex.DecodeString(vectorSeed)
	key := ed25519.NewKeyFromSeed(seed)
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32))
	var payloads, sigs [][]byte
	for i := range 700 {
		p := []byte(fmt.Sprintf(`{"n":%d}`, i))
		sig := ed25519.Sign(key, signedMessage(p))
		switch i {
		case 3:
			sig = ed25519.Sign(other, signedMessage(p))
		case 250:
			p = []byte(`{"n":-1}`)
		case 699:
			sig = sigs[0]
		}
		payloads, sigs = append(payloads, p), append(sigs, sig)
	}
	pub := key.Public().(ed25519.PublicKey)
	want := checkEach(pub, SignatureContext, payloads, sigs)
	for _, got := range [][]bool{batchAll(pub, SignatureContext, payloads, sigs), checkBatched(pub, SignatureContext, payloads, sigs)} {
		for i := range want {
			if got[i] != want[i] || got[i] != (i != 3 && i != 250 && i != 699) {
				t.Errorf("signature %d: batched %v, one at a time %v", i, got[i], want[i])
			}
		}
	}
}

// verifyBoth verifies data one signature at a time and batched (every batch size) and
// fails the test unless the reports are identical. It returns the report.
func verifyBoth(t testing.TB, name string, data []byte, pub ed25519.PublicKey, opts VerifyOptions) *Report {
	t.Helper()
	each, batched := &Report{Problems: []Problem{}}, &Report{Problems: []Problem{}}
	verifyDataWith(each, data, pub, opts, checkEach)
	verifyDataWith(batched, data, pub, opts, batchAll)
	if a, b := reportJSON(each), reportJSON(batched); a != b {
		t.Errorf("%s: reports differ\none at a time %s\nbatched      %s", name, a, b)
	}
	return batched
}

// journalVectors returns every journal of testdata/journal (impossible/ and governed/
// included), by path relative to it.
func journalVectors(t testing.TB) map[string][]byte {
	files := map[string][]byte{}
	err := filepath.WalkDir(vectorDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".jsonl") {
			return err
		}
		rel, _ := filepath.Rel(vectorDir, path)
		files[rel] = mustRead(t, path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 25 {
		t.Fatalf("only %d vectors under %s", len(files), vectorDir)
	}
	return files
}

// TestBatchedVerifyVectors: every journal vector, with no expectations and with each
// expectation of expected.json, and long journals — genuine, tampered, spliced, torn,
// under another key — verify to identical reports one signature at a time and batched.
func TestBatchedVerifyVectors(t *testing.T) {
	pub := vectorKey()
	var exp expectedFile
	if err := json.Unmarshal(mustRead(t, filepath.Join(vectorDir, "expected.json")), &exp); err != nil {
		t.Fatal(err)
	}
	for name, data := range journalVectors(t) {
		verifyBoth(t, name, data, pub, VerifyOptions{})
		for _, c := range exp.Vectors {
			if c.File == filepath.ToSlash(name) {
				verifyBoth(t, name, data, pub, VerifyOptions{RunID: c.RunID, Head: c.Head, Records: c.Records})
			}
		}
	}
	seed, _ := hex.DecodeString(vectorSeed)
	long := forge(ed25519.NewKeyFromSeed(seed), "coder", delegatedRun, longRun(400))
	ls := splitLines(long)
	edited := bytes.Clone(long)
	edited[bytes.Index(edited, []byte(`"fs-40"`))+4] = '9'
	otherKey := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32)).Public().(ed25519.PublicKey)
	for name, data := range map[string][]byte{
		"long":           long,
		"long, edited":   edited,
		"long, swapped":  joinLines(append(append(append([][]byte{}, ls[:200]...), ls[201], ls[200]), ls[202:]...)...),
		"long, torn":     long[:len(long)-40],
		"long, repeated": joinLines(append(append([][]byte{}, ls...), ls[5:300]...)...),
	} {
		r := verifyBoth(t, name, data, pub, VerifyOptions{})
		if name == "long" && r.ExitCode() != 2 {
			t.Errorf("the long journal: %s", reportJSON(r))
		}
		verifyBoth(t, name+", other key", data, otherKey, VerifyOptions{})
		verifyBoth(t, name+", short key", data, pub[:31], VerifyOptions{})
	}
}

// TestVerifyDirPaths: VerifyDir batched across files gives the reports, in the same
// order, of one signature at a time, on the vector directories and on a directory of
// 400 runs a few of which are tampered, renamed, copied or torn.
func TestVerifyDirPaths(t *testing.T) {
	pub := vectorKey()
	seed, _ := hex.DecodeString(vectorSeed)
	key := ed25519.NewKeyFromSeed(seed)
	dir := t.TempDir()
	for i := range 400 {
		runID := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		data := forge(key, "greeter", runID, allowedRunDef.records())
		name := FileName(agentID("greeter"), runID)
		switch i {
		case 7:
			data[100] ^= 1
		case 150:
			name = "renamed.jsonl"
		case 151:
			data = forge(key, "greeter", fmt.Sprintf("00000000-0000-4000-8000-%012d", 152), allowedRunDef.records())
		case 399:
			data = data[:len(data)-10]
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{vectorDir, filepath.Join(vectorDir, "governed"), dir} {
		each, err := verifyDir(d, pub, checkEach)
		if err != nil {
			t.Fatal(err)
		}
		for _, check := range []sigCheck{batchAll, checkBatched} {
			batched, err := verifyDir(d, pub, check)
			if err != nil {
				t.Fatal(err)
			}
			if len(batched) != len(each) {
				t.Fatalf("%s: %d reports batched, %d one at a time", d, len(batched), len(each))
			}
			for i := range each {
				if a, b := reportJSON(each[i]), reportJSON(batched[i]); a != b {
					t.Errorf("%s report %d differs\none at a time %s\nbatched      %s", d, i, a, b)
				}
			}
		}
	}
}

// verifySeeds are the journals the fuzz targets start from: the vectors, and the
// fuzz corpus saved for FuzzVerify.
func verifySeeds(t testing.TB) [][]byte {
	seeds := [][]byte{[]byte(""), []byte("{\"payload\":{},\"signature\":\"\"}\n")}
	for _, data := range journalVectors(t) {
		seeds = append(seeds, data)
	}
	corpus, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzVerify", "*"))
	for _, path := range corpus {
		text := string(mustRead(t, path))
		lit, ok := strings.CutPrefix(text, "go test fuzz v1\n[]byte(")
		b, err := strconv.Unquote(strings.TrimSuffix(strings.TrimSpace(lit), ")"))
		if !ok || err != nil {
			t.Fatalf("%s is not a []byte fuzz corpus entry", path)
		}
		seeds = append(seeds, []byte(b))
	}
	return seeds
}

// FuzzVerifyPaths: any journal verifies to the same report one signature at a time and
// batched.
func FuzzVerifyPaths(f *testing.F) {
	pub := vectorKey()
	for _, s := range verifySeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		verifyBoth(t, "fuzzed", data, pub, VerifyOptions{})
	})
}

// FuzzObjectMembers: on any JSON object PayloadMembers lets through to it (valid UTF-8
// JSON, no member name twice), objectMembers returns what json.Unmarshal into a
// map[string]json.RawMessage returns.
func FuzzObjectMembers(f *testing.F) {
	for _, data := range journalVectors(f) {
		for _, l := range bytes.SplitAfter(data, []byte("\n")) {
			if p, _, err := splitLine(l); err == nil {
				f.Add(p)
			}
		}
	}
	for _, s := range []string{`{}`, ` { } `, "{\"a\" :\t1 ,\n\"b\":[ 1, {\"c\":\"]}\\\"\"} ] , \"d\":{\"e\":[[]]}}", `{"\u0061\n":"x\\","b":true,"c":null,"d":-1.5e3,"e":"é"}`, `{"a":"\ud800"}`, `null`, ` [ ] `, `"{}"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		if !utf8.Valid(text) || !json.Valid(text) || strictjson.Check(text, strictjson.Options{Single: true}) != nil {
			return
		}
		if v := bytes.TrimLeft(text, " \t\r\n"); v[0] != '{' {
			// Not an object — which json.Unmarshal takes into a map when it is null —
			// objectMembers refuses.
			if got, _, err := objectMembers(text); err == nil {
				t.Fatalf("%q, not an object: objectMembers %q", text, got)
			}
			return
		}
		var want map[string]json.RawMessage
		wantErr := json.Unmarshal(text, &want)
		got, order, err := objectMembers(text)
		if wantErr != nil {
			if err == nil {
				t.Fatalf("%q: objectMembers %v, json.Unmarshal %v", text, got, wantErr)
			}
			return
		}
		if err != nil || len(order) != len(want) || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nobjectMembers %q (%v)\njson.Unmarshal %q", text, got, err, want)
		}
	})
}

// TestBadSignaturesCountedNotRead: once a report lists no more problems, the
// rest of the journal is counted, not read. docs/journal-format.md, "symbi audit": "A
// report lists at most 100 problems and then `too many problems; stopped listing`; the
// rest of the file is then counted (`records`, `head`), not read". Signatures are checked
// before lines are read; checked all, a journal of well-shaped lines whose signatures do
// not verify would cost an Ed25519 verification per line (twice: a failed batch, then one
// at a time) — about a minute for 64 MiB of them — although only the first 101 are
// reported. After the report is full, no more signatures are checked (at most a batch
// past the 101st problem).
func TestBadSignaturesCountedNotRead(t *testing.T) {
	pub := vectorKey()
	// A well-shaped line (P = {}, canonical base64 of 64 zero bytes) whose signature
	// does not verify.
	line := []byte(linePrefix + "{}" + sigPrefix + strings.Repeat("A", 86) + "==" + lineSuffix)
	const n = 20000
	data := bytes.Repeat(line, n)
	checked := 0
	counting := func(pub ed25519.PublicKey, context string, payloads, sigs [][]byte) []bool {
		checked += len(sigs)
		return checkBatched(pub, context, payloads, sigs)
	}
	r := &Report{Problems: []Problem{}}
	verifyDataWith(r, data, pub, VerifyOptions{}, counting)
	if r.ExitCode() != 1 || r.Records != n || len(r.Problems) != maxProblems+1 {
		t.Fatalf("exit %d, %d records, %d problems; want 1, %d, %d", r.ExitCode(), r.Records, len(r.Problems), n, maxProblems+1)
	}
	if limit := maxProblems + 1 + batchMax; checked > limit {
		t.Errorf("%d signatures checked for a report that stopped listing at line %d (want at most %d): the rest of the file was read, not counted",
			checked, maxProblems+1, limit)
	}
}
