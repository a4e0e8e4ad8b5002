package journal

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// vectorKey returns the public key of the vectors.
func vectorKey() ed25519.PublicKey {
	seed, _ := hex.DecodeString(vectorSeed)
	return ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
}

func readVector(t testing.TB, name string) []byte {
	t.Helper()
	return mustRead(t, filepath.Join(vectorDir, name))
}

// TestMangleEveryByte changes every byte of complete vectors; no change may leave the
// journal valid and complete, and each verifies to the same report one signature at a
// time and batched. Under -race or -short only one change per byte of one vector is tried
// (the signature checks are slow there); otherwise three per byte of both.
func TestMangleEveryByte(t *testing.T) {
	pub := vectorKey()
	masks := []byte{0x01, 0x20, 0x80}
	names := []string{"allowed.jsonl", "denied.jsonl"}
	if testing.Short() || raceEnabled {
		masks, names = masks[:1], names[:1]
	}
	for _, name := range names {
		orig := readVector(t, name)
		if r := verifyBytes(orig, pub, VerifyOptions{}); r.ExitCode() != 0 {
			t.Fatalf("%s: original not complete: %s", name, reportJSON(r))
		}
		// Every byte, split among the cores: each worker mangles its own copy.
		workers := runtime.GOMAXPROCS(0)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				buf := bytes.Clone(orig)
				for i := w; i < len(buf); i += workers {
					for _, m := range masks {
						buf[i] ^= m
						if r := verifyBoth(t, fmt.Sprintf("%s byte %d ^ %#x", name, i, m), buf, pub, VerifyOptions{}); r.ExitCode() == 0 {
							t.Errorf("%s: byte %d ^ %#x still valid and complete", name, i, m)
						}
						buf[i] ^= m
					}
				}
			})
		}
		wg.Wait()
	}
}

// TestTruncation cuts the complete run at every line boundary: valid but incomplete alone,
// invalid against the original receipt.
func TestTruncation(t *testing.T) {
	pub := vectorKey()
	data := readVector(t, "allowed.jsonl")
	lines := splitLines(data)
	full := verifyBytes(data, pub, VerifyOptions{})
	receipt := VerifyOptions{Head: full.Head, Records: full.Records}
	cut := 0
	for k := 0; k < len(lines); k++ {
		prefix := data[:cut]
		if r := verifyBytes(prefix, pub, VerifyOptions{}); r.ExitCode() != 2 || r.Records != k {
			t.Errorf("%d lines: exit %d, records %d; want 2, %d", k, r.ExitCode(), r.Records, k)
		}
		if r := verifyBytes(prefix, pub, receipt); r.ExitCode() != 1 {
			t.Errorf("%d lines with the receipt: exit %d, want 1", k, r.ExitCode())
		}
		// Any cut inside the next line is a torn tail: still incomplete, never trusted.
		torn := data[:cut+len(lines[k])/2]
		if r := verifyBytes(torn, pub, VerifyOptions{}); r.ExitCode() != 2 || r.TailBytes != len(lines[k])/2 {
			t.Errorf("%d lines + torn: exit %d, tail %d", k, r.ExitCode(), r.TailBytes)
		}
		cut += len(lines[k])
	}
	if r := verifyBytes(data, pub, receipt); r.ExitCode() != 0 {
		t.Errorf("full run with its receipt: %s", reportJSON(r))
	}
}

// signLine signs an arbitrary payload with the vector key into a journal line.
func signLine(payload string) []byte {
	seed, _ := hex.DecodeString(vectorSeed)
	sig := ed25519.Sign(ed25519.NewKeyFromSeed(seed), signedMessage([]byte(payload)))
	return []byte(linePrefix + payload + sigPrefix + base64.StdEncoding.EncodeToString(sig) + lineSuffix)
}

func TestVerifyRejects(t *testing.T) {
	pub := vectorKey()
	allowed := readVector(t, "allowed.jsonl")
	denied := readVector(t, "denied.jsonl")
	al, dl := splitLines(allowed), splitLines(denied)
	head := lineHash(al[4])
	afterTerminated := signLine(`{"v":1,"run_id":"` + allowedRun + `","seq":5,"prev":"` + head + `","time":"2026-01-02T03:04:06.000Z","agent_id":"` + agentID("greeter") + `","type":"note","data":{}}`)
	p0 := `"prev":"` + ZeroHash + `","time":"2026-01-02T03:04:05.000Z","agent_id":"a","type":"started","data":`
	otherKey := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32)).Public().(ed25519.PublicKey)
	tests := []struct {
		name string
		data []byte
		pub  ed25519.PublicKey
		opts VerifyOptions
		want int
		text string
	}{
		{"reorder", joinLines(al[0], al[1], al[3], al[2], al[4]), pub, VerifyOptions{}, 1, "seq is"},
		{"duplicate", joinLines(al[0], al[1], al[1], al[2], al[3], al[4]), pub, VerifyOptions{}, 1, "seq is"},
		{"duplicate last", joinLines(al[0], al[1], al[2], al[3], al[4], al[4]), pub, VerifyOptions{}, 1, "after the terminated"},
		{"splice", joinLines(al[0], al[1], dl[2], al[3], al[4]), pub, VerifyOptions{}, 1, "chain is broken"},
		{"other run's tail", joinLines(al[0], al[1], al[2], dl[3], dl[4]), pub, VerifyOptions{}, 1, "run_id"},
		{"wrong run id", allowed, pub, VerifyOptions{RunID: deniedRun}, 1, "not the expected"},
		{"wrong key", allowed, otherKey, VerifyOptions{}, 1, "signature does not verify"},
		{"record after terminated", append(bytes.Clone(allowed), afterTerminated...), pub, VerifyOptions{}, 1, "after the terminated"},
		{"wrong receipt head", allowed, pub, VerifyOptions{Head: lineHash(al[3]), Records: 5}, 1, "receipt does not match"},
		{"unknown version", signLine(`{"v":2,"run_id":"r","seq":0,` + p0 + `{}}`), pub, VerifyOptions{}, 1, "unknown version"},
		{"float", signLine(`{"v":1,"run_id":"r","seq":0,` + p0 + `{"x":1.5}}`), pub, VerifyOptions{}, 1, "floating-point"},
		{"exponent", signLine(`{"v":1,"run_id":"r","seq":0,` + p0 + `{"x":1e3}}`), pub, VerifyOptions{}, 1, "floating-point"},
		{"duplicate member", signLine(`{"v":1,"run_id":"r","run_id":"s","seq":0,` + p0 + `{}}`), pub, VerifyOptions{}, 1, "duplicate member"},
		{"lone surrogate", signLine(`{"v":1,"run_id":"r","seq":0,` + p0 + `{"agent":"\ud800"}}`), pub, VerifyOptions{}, 1, "lone surrogate"},
		{"unknown member", signLine(`{"v":1,"run_id":"r","seq":0,"extra":1,` + p0 + `{}}`), pub, VerifyOptions{}, 1, "unknown member"},
		{"missing member", signLine(`{"v":1,"run_id":"r","seq":0,"prev":"` + ZeroHash + `","agent_id":"a","type":"started","data":{}}`), pub, VerifyOptions{}, 1, "lacks member"},
		{"string seq", signLine(`{"v":1,"run_id":"r","seq":"0",` + p0 + `{}}`), pub, VerifyOptions{}, 1, "seq is"},
		{"local time", signLine(`{"v":1,"run_id":"r","seq":0,"prev":"` + ZeroHash + `","time":"2026-01-02T03:04:05+01:00","agent_id":"a","type":"started","data":{}}`), pub, VerifyOptions{}, 1, "RFC 3339 UTC"},
		{"first not started", signLine(`{"v":1,"run_id":"r","seq":0,"prev":"` + ZeroHash + `","time":"2026-01-02T03:04:05Z","agent_id":"a","type":"terminated","data":{"reason":"x","released":false}}`), pub, VerifyOptions{}, 1, "want started"},
		{"non-canonical base64", bytes.Replace(allowed, []byte("==\"}\n"), []byte("=\"}\n"), 1), pub, VerifyOptions{}, 1, "line is not"},
		{"spaces in line", bytes.Replace(allowed, []byte(`{"payload":`), []byte(`{"payload": `), 1), pub, VerifyOptions{}, 1, "signature does not verify"},
		{"crlf", bytes.ReplaceAll(allowed, []byte("\n"), []byte("\r\n")), pub, VerifyOptions{}, 1, "line is not"},
		{"unknown type accepted", joinLines(signLine(`{"v":1,"run_id":"r","seq":0,`+p0+`{}}`), signLine(`{"v":1,"run_id":"r","seq":1,"prev":"`+lineHash(signLine(`{"v":1,"run_id":"r","seq":0,`+p0+`{}}`))+`","time":"2026-01-02T03:04:05Z","agent_id":"a","type":"future_kind","data":{"n":1}}`)), pub, VerifyOptions{}, 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := verifyBytes(tt.data, tt.pub, tt.opts)
			if r.ExitCode() != tt.want || !strings.Contains(reportJSON(r), tt.text) {
				t.Errorf("exit %d, want %d with %q; report %s", r.ExitCode(), tt.want, tt.text, reportJSON(r))
			}
		})
	}
}

func TestVerifyFiles(t *testing.T) {
	pub := vectorKey()
	dir := t.TempDir()
	src, _ := filepath.Abs(filepath.Join(vectorDir, "allowed.jsonl"))
	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(src, link); err != nil {
		t.Fatal(err)
	}
	if r := Verify(link, pub, VerifyOptions{}); r.ExitCode() != 1 || !strings.Contains(reportJSON(r), "symlink") {
		t.Errorf("symlinked journal: %s", reportJSON(r))
	}
	if r := Verify(dir, pub, VerifyOptions{}); r.ExitCode() != 1 || !strings.Contains(reportJSON(r), "not a regular file") {
		t.Errorf("directory: %s", reportJSON(r))
	}
	if r := Verify(filepath.Join(dir, "absent.jsonl"), pub, VerifyOptions{}); r.ExitCode() != 1 {
		t.Errorf("absent: %s", reportJSON(r))
	}
	big := filepath.Join(dir, "big.jsonl")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, MaxFileBytes+1); err != nil {
		t.Fatal(err)
	}
	if r := Verify(big, pub, VerifyOptions{}); r.ExitCode() != 1 || !strings.Contains(reportJSON(r), "67108864-byte limit") {
		t.Errorf("oversized: %s", reportJSON(r))
	}
	// Directory mode: eight of the files are of the allowed run, so each is flagged as
	// one of several journals of one run; alone, allowed.jsonl verifies (TestVectors).
	want := map[string]int{"allowed.jsonl": 1, "denied.jsonl": 0, "crashed.jsonl": 2, "torn.jsonl": 1, "truncated.jsonl": 1,
		"tampered-payload.jsonl": 1, "tampered-signature.jsonl": 1, "swapped.jsonl": 1, "spliced.jsonl": 1, "deleted.jsonl": 1, "delegated.jsonl": 0, "gated.jsonl": 0}
	verifyDirCodes(t, vectorDir, pub, want, "also recorded in")
	// The governed vector: the allowed run's journal was copied over the denied run's.
	greeter, auditor := agentID("greeter"), agentID("auditor")
	verifyDirCodes(t, filepath.Join(vectorDir, "governed"), pub, map[string]int{
		FileName(greeter, allowedRun): 1, FileName(greeter, deniedRun): 1, FileName(auditor, crashedRun): 2,
	}, "run "+allowedRun+" is also recorded in "+FileName(greeter, deniedRun))
}

// verifyDirCodes runs VerifyDir on dir and requires each file's exit code, and a problem
// containing problem in some report.
func verifyDirCodes(t *testing.T, dir string, pub ed25519.PublicKey, want map[string]int, problem string) {
	t.Helper()
	reports, err := VerifyDir(dir, pub)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]int{}
	found := false
	for _, r := range reports {
		codes[filepath.Base(r.Path)] = r.ExitCode()
		found = found || strings.Contains(reportJSON(r), problem)
	}
	if len(codes) != len(want) {
		t.Errorf("VerifyDir %s saw %v", dir, codes)
	}
	for name, c := range want {
		if codes[name] != c {
			t.Errorf("VerifyDir %s: exit %d, want %d", name, codes[name], c)
		}
	}
	if !found {
		t.Errorf("VerifyDir %s: no report says %q", dir, problem)
	}
}

// FuzzVerify feeds arbitrary journals to the verifier: it must not panic, and nothing but
// the genuine complete vectors may verify as valid and complete.
func FuzzVerify(f *testing.F) {
	pub := vectorKey()
	var genuine [][]byte
	for _, name := range []string{"allowed.jsonl", "denied.jsonl", "crashed.jsonl", "torn.jsonl", "swapped.jsonl", "spliced.jsonl", "tampered-payload.jsonl"} {
		b, err := os.ReadFile(filepath.Join(vectorDir, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		if name == "allowed.jsonl" || name == "denied.jsonl" {
			genuine = append(genuine, b)
		}
	}
	f.Add([]byte(""))
	f.Add([]byte("{\"payload\":{},\"signature\":\"\"}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := verifyBytes(data, pub, VerifyOptions{})
		switch r.ExitCode() {
		case 0:
			for _, g := range genuine {
				if bytes.Equal(g, data) {
					return
				}
			}
			t.Fatalf("a journal that is not a genuine vector verified complete: %q", data)
		case 1:
			if len(r.Problems) == 0 {
				t.Fatal("invalid without a problem")
			}
		case 2:
			if len(r.Problems) != 0 {
				t.Fatal("incomplete with problems")
			}
		}
	})
}

// A member name that differs from "released" only by case is not "released": a signed
// terminated record whose data reads {"released":false,"Released":true} is not released.
func TestVerifyExactMemberNames(t *testing.T) {
	_, root := newProject(t)
	s := openStore(t, root)
	w, err := s.Create("agent", "run")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(Started{Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(caseFolded{Reason: "cancelled", Released2: true}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	rep := Verify(w.Path(), s.PublicKey(), VerifyOptions{})
	if rep.Released || rep.ExitCode() != 0 || rep.TerminalReason != "cancelled" {
		t.Fatalf("report %+v: want complete, cancelled, not released", rep)
	}
}

// caseFolded is a terminated record with an extra, case-folded "Released" member.
type caseFolded struct {
	Reason    string `json:"reason"`
	Released  bool   `json:"released"`
	Released2 bool   `json:"Released"`
}

func (caseFolded) Type() string { return TypeTerminated }

// TestTimeIsRFC3339: a record's time is RFC 3339 UTC ending in Z, as a verifier written
// from the format's document reads it: time.Parse alone would also accept a one-digit hour
// and a comma before the fraction.
func TestTimeIsRFC3339(t *testing.T) {
	pub := vectorKey()
	for _, tm := range []string{
		"2026-01-02T3:04:05.007Z",  // one-digit hour
		"2026-01-02T03:04:05,007Z", // comma before the fraction
		"2026-01-02T03:04:05.Z",    // a fraction without digits
		"2026-01-02T03:04:05.0000000001Z",
		"2026-01-02T03:04:05.007+00:00",
		"2026-01-02 03:04:05.007Z",
		"2026-13-02T03:04:05.007Z",
		"0001-01-01T00:00:00Z",
	} {
		line := signLine(`{"v":1,"run_id":"r","seq":0,"prev":"` + ZeroHash + `","time":"` + tm + `","agent_id":"a","type":"started","data":{}}`)
		if r := verifyBytes(line, pub, VerifyOptions{}); r.ExitCode() != 1 || len(r.Problems) == 0 || r.Problems[0].Line != 1 {
			t.Errorf("time %q: want invalid (not RFC 3339), got %s", tm, reportJSON(r))
		}
	}
	// The writer's own form, and RFC 3339's others in UTC, verify.
	for _, tm := range []string{"2026-01-02T03:04:05.007Z", "2026-01-02T03:04:05Z", "2026-01-02T03:04:05.123456789Z"} {
		line := signLine(`{"v":1,"run_id":"r","seq":0,"prev":"` + ZeroHash + `","time":"` + tm + `","agent_id":"a","type":"started","data":{}}`)
		if r := verifyBytes(line, pub, VerifyOptions{}); r.ExitCode() != 2 {
			t.Errorf("time %q: %s", tm, reportJSON(r))
		}
	}
}

// TestVerifyBoundedOnEmptyLines: a file within the 64 MiB limit made of empty lines is
// millions of lines. Once the report lists no more problems, the rest is counted, not
// read: verification of 2 MiB of them allocates far less than the 690 MiB it took when
// every line was opened and hashed (16 MiB took 3.2 GB), and still counts every line.
func TestVerifyBoundedOnEmptyLines(t *testing.T) {
	data := []byte(strings.Repeat("\n", 2<<20))
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	r := verifyBytes(data, vectorKey(), VerifyOptions{})
	runtime.ReadMemStats(&m1)
	if r.ExitCode() != 1 || r.Records != len(data) || len(r.Problems) != maxProblems+1 {
		t.Fatalf("a file of empty lines: exit %d, %d records, %d problems; want 1, %d, %d", r.ExitCode(), r.Records, len(r.Problems), len(data), maxProblems+1)
	}
	if alloc, bound := m1.TotalAlloc-m0.TotalAlloc, uint64(32*len(data)); alloc > bound {
		t.Errorf("verifying %d bytes of empty lines allocated %d MiB, more than %d MiB (32 bytes per input byte)", len(data), alloc>>20, bound>>20)
	}
}

// timeForm is RFC 3339's form in UTC, as the format's document gives it.
var timeForm = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?Z$`)

// FuzzParseTime: ParseTime accepts exactly the texts of RFC 3339's UTC form whose values
// are a time (month 1–12, day of the month, hour 0–23, …) other than the zero time.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2026-01-02T03:04:05.007Z", "2026-01-02T03:04:05Z", "2026-01-02T3:04:05.007Z",
		"2026-01-02T03:04:05,007Z", "2026-13-02T03:04:05Z", "2026-02-30T03:04:05Z", "0001-01-01T00:00:00Z",
		"2026-01-02T03:04:05.Z", "2026-01-02T03:04:05.0123456789Z", "2026-01-02T03:04:05+00:00", "2026-01-02T24:00:00Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTime(s)
		want, perr := time.Parse(time.RFC3339Nano, s)
		ok := timeForm.MatchString(s) && perr == nil && !want.IsZero()
		if (err == nil) != ok || (ok && !got.Equal(want)) {
			t.Fatalf("ParseTime(%q) = %v, %v; the form matches %v, time.Parse %v, %v", s, got, err, timeForm.MatchString(s), want, perr)
		}
	})
}

// nestedData is {"kk…":{"kk…":…{"kk…":"v"}…}} nested depth levels, each key k bytes.
func nestedData(depth, k int) []byte {
	key := `"` + strings.Repeat("k", k) + `":`
	var b strings.Builder
	for range depth {
		b.WriteString("{" + key)
	}
	b.WriteString(`"v"`)
	b.WriteString(strings.Repeat("}", depth))
	return []byte(b.String())
}

func allocated(f func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	f()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// TestFactsDeepKeys: Entry.Facts (symbi audit show, on an unverified journal) costs in
// proportion to its input: a line nested 9,000 levels (encoding/json allows 10,000) once
// allocated 900 MB for 135 KB, each level copying the whole key path; it now flattens 8
// levels and shows the rest as {…}.
func TestFactsDeepKeys(t *testing.T) {
	data := nestedData(9000, 10)
	decode := allocated(func() {
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
	})
	var got string
	facts := allocated(func() { got = Entry{Data: data}.Facts() })
	if want := strings.Repeat("kkkkkkkkkk.", 7) + "kkkkkkkkkk={…}"; got != want {
		t.Fatalf("Facts = %.200q, want %q", got, want)
	}
	limit := 4*decode + 16*uint64(len(data))
	if facts > limit {
		t.Errorf("Facts of a %d-byte line nested 9,000 levels allocated %d MB; decoding it takes %d MB (want at most %d MB): quadratic in the depth",
			len(data), facts>>20, decode>>20, limit>>20)
	}
}

// TestPayloadTrailingWhitespace: P is the JSON object between the fixed
// prefix and the fixed suffix, with no whitespace outside it. docs/journal-format.md,
// "Line format": "There is no whitespace anywhere outside `P`: the line is the 11 bytes
// `{"payload":`, then `P`, then the 14 bytes `,"signature":"`" and step 3.1 of the
// algorithm, "the exact shape above". White space after P's '}' is refused as white
// space before its '{' is (`{"payload":{…} ,"signature":…`, `{"payload": {…},…`), even
// signed by the key's holder: both sides of P are held to one rule.
func TestPayloadTrailingWhitespace(t *testing.T) {
	pub := vectorKey()
	lines := splitLines(readVector(t, "allowed.jsonl"))
	resign := func(edit func(p string) string) []byte {
		var out []byte
		prev := ZeroHash
		for _, l := range lines {
			p := string(l[len(linePrefix) : len(l)-len(lineSuffix)-sigB64Len-len(sigPrefix)])
			at := strings.Index(p, `"prev":"`) + len(`"prev":"`)
			p = p[:at] + prev + p[at+64:]
			nl := signLine(edit(p))
			out = append(out, nl...)
			prev = lineHash(nl)
		}
		return out
	}
	if r := verifyBytes(resign(func(p string) string { return p }), pub, VerifyOptions{}); r.ExitCode() != 0 {
		t.Fatalf("the re-signed run itself: %s", reportJSON(r))
	}
	if r := verifyBytes(resign(func(p string) string { return " " + p }), pub, VerifyOptions{}); r.ExitCode() != 1 {
		t.Fatalf("leading space: exit %d, want 1", r.ExitCode())
	}
	for _, ws := range []string{" ", "\t", "\r", " \t\r "} {
		r := verifyBytes(resign(func(p string) string { return p + ws }), pub, VerifyOptions{})
		if r.ExitCode() != 1 {
			t.Errorf("P followed by %q inside the envelope: exit %d (%s), want 1 like a leading space", ws, r.ExitCode(), r.Status)
		}
	}
}

// signedMessage is the message a line's signature covers: the context, then P.
func signedMessage(p []byte) []byte {
	m := make([]byte, 0, len(SignatureContext)+len(p))
	return append(append(m, SignatureContext...), p...)
}
