package journal

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// seqPrev is where a template line's seq and prev stand: the harness fills them in, so
// that a mutated, inserted or deleted line still chains and the fuzzer explores the
// records, not the chain.
var seqPrev = regexp.MustCompile(`"seq":[0-9]+,"prev":"[0-9a-f]{64}"`)

const templateSeqPrev = `"seq":$SEQ,"prev":"$PREV"`

// zeroSig is a well-formed signature (canonical base64 of 64 bytes) that acceptAll takes.
var zeroSig = strings.Repeat("A", 86) + "=="

// acceptAll is a signature check that takes every signature: what the verifier does after
// a line's signature verified, without the cost of making one (an Ed25519 signature per
// line per execution made the fuzzer spend its time signing and minimizing).
func acceptAll(_ ed25519.PublicKey, _ string, _, sigs [][]byte) []bool {
	ok := make([]bool, len(sigs))
	for i := range ok {
		ok[i] = true
	}
	return ok
}

// sealTemplates makes each line of templates (payloads, $SEQ and $PREV standing for the
// line's seq and the previous line's hash) a journal line, as the writer would, with a
// signature acceptAll takes.
func sealTemplates(templates []byte) (data []byte, payloads [][]byte) {
	prev := ZeroHash
	for seq, tmpl := range bytes.Split(templates, []byte("\n")) {
		p := bytes.ReplaceAll(tmpl, []byte("$SEQ"), []byte(strconv.Itoa(seq)))
		p = bytes.ReplaceAll(p, []byte("$PREV"), []byte(prev))
		line := []byte(linePrefix + string(p) + sigPrefix + zeroSig + lineSuffix)
		data = append(data, line...)
		payloads = append(payloads, p)
		prev = lineHash(line)
	}
	return data, payloads
}

// FuzzSignedJournal: a record's payload is read only once its line's signature verifies,
// so FuzzVerify's mutations never reach decodePayload, decodeStep or the state machine:
// the fuzzer cannot sign. Here every line the fuzzer wrote is chained and its signature
// taken as good (acceptAll). Whatever the payloads hold, verification never panics, and a
// journal it finds without problem
// is one every reader of docs/journal-format.md reads the same way: each payload strict
// JSON with exactly the envelope's members, v 1, seq its index, one run_id and agent_id,
// started first, nothing after terminated; complete only when it ends in terminated; and
// released only when that terminated record's data says "released":true with reason
// "completed", after a completed answer that an allow (or a person's approve) let out.
func FuzzSignedJournal(f *testing.F) {
	const head = `{"v":1,"run_id":"r","seq":$SEQ,"prev":"$PREV","time":"2026-01-02T03:04:05.000Z","agent_id":"a","type":`
	rec := func(typ, data string) string { return head + `"` + typ + `","data":` + data + `}` }
	small := []string{
		rec("started", `{"caller":"alice","caller_auth":"token"}`),
		rec("inference_requested", `{"call_id":"c"}`),
		rec("inference_finished", `{"call_id":"c","outcome":"completed","text_sha256":"h"}`),
		rec("policy_evaluated", `{"decision":"allow","text_sha256":"h"}`),
		rec("terminated", `{"reason":"completed","released":true}`),
	}
	f.Add([]byte(strings.Join(small, "\n")))
	if data, _ := sealTemplates([]byte(strings.Join(small, "\n"))); verifyBytesWith(data, acceptAll).ExitCode() != 0 || !verifyBytesWith(data, acceptAll).Released {
		f.Fatalf("the harness's released run does not verify: %s", reportJSON(verifyBytesWith(data, acceptAll)))
	}
	f.Add([]byte(strings.Join(small[:4], "\n")))
	f.Add([]byte(strings.Join(append(small[:3:3], rec("policy_evaluated", `{"decision":"deny","text_sha256":"h"}`),
		rec("approval_requested", `{"gate":"human","request_id":"answer","text_sha256":"h"}`),
		rec("approval_decided", `{"request_id":"answer","decision":"approve"}`),
		rec("terminated", `{"reason":"completed","released":true}`)), "\n")))
	f.Add([]byte(strings.Join(append(small[:4:4], rec("terminated", `{"reason":"completed","released":false,"Released":true}`)), "\n")))
	f.Add([]byte(strings.Join(append(small[:4:4], rec("terminated", `{"reason":"completed","released":"true"}`)), "\n")))
	f.Add([]byte(strings.Join(append(small[:3:3], rec("policy_evaluated", `{"decision":"allow","text_sha256":"other"}`), small[4]), "\n")))
	f.Add([]byte(strings.Join(append(small[:3:3], rec("note", `{}`), small[3], small[4]), "\n")))
	f.Add([]byte(rec("started", `{}`)))
	f.Add([]byte(""))
	for _, name := range []string{"allowed.jsonl", "denied.jsonl", "gated.jsonl", "delegated.jsonl", "crashed.jsonl"} {
		b, err := os.ReadFile(filepath.Join(vectorDir, name))
		if err != nil {
			f.Fatal(err)
		}
		var tmpl [][]byte
		for _, l := range bytes.SplitAfter(b, []byte("\n")) {
			if p, _, err := splitLine(l); err == nil {
				tmpl = append(tmpl, seqPrev.ReplaceAll(p, []byte(templateSeqPrev)))
			}
		}
		f.Add(bytes.Join(tmpl, []byte("\n")))
	}
	pub := vectorKey()
	f.Fuzz(func(t *testing.T, templates []byte) {
		data, payloads := sealTemplates(templates)
		r := &Report{Problems: []Problem{}}
		verifyDataWith(r, data, pub, VerifyOptions{}, acceptAll)
		if r.ExitCode() == 1 {
			if len(r.Problems) == 0 {
				t.Fatal("invalid without a problem")
			}
			return
		}
		type rec struct {
			typ  string
			data map[string]json.RawMessage
		}
		var recs []rec
		var runID, agentID string
		for i, p := range payloads {
			m, err := PayloadMembers(p, envelopeMembers)
			if err != nil {
				t.Fatalf("line %d %q: verified, but the payload is not the strict envelope: %v", i+1, p, err)
			}
			var typ, run, agent string
			var d map[string]json.RawMessage
			if string(m["v"]) != "1" || string(m["seq"]) != strconv.Itoa(i) || json.Unmarshal(m["type"], &typ) != nil ||
				json.Unmarshal(m["run_id"], &run) != nil || json.Unmarshal(m["agent_id"], &agent) != nil ||
				json.Unmarshal(m["data"], &d) != nil || d == nil {
				t.Fatalf("line %d %q: verified with a wrong envelope", i+1, p)
			}
			if i == 0 {
				runID, agentID = run, agent
				if typ != TypeStarted {
					t.Fatalf("verified, but the first record is %q", typ)
				}
			} else if run != runID || agent != agentID || typ == TypeStarted {
				t.Fatalf("line %d %q: verified, another run's or a second started", i+1, p)
			}
			if i > 0 && recs[i-1].typ == TypeTerminated {
				t.Fatalf("line %d: verified after terminated", i+1)
			}
			recs = append(recs, rec{typ, d})
		}
		if r.Records != len(recs) {
			t.Fatalf("%d records reported, %d lines", r.Records, len(recs))
		}
		str := func(d map[string]json.RawMessage, k string) string {
			var s string
			if raw := d[k]; len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
				return "\x00not a string"
			}
			return s
		}
		if r.Complete != (len(recs) > 0 && recs[len(recs)-1].typ == TypeTerminated) {
			t.Fatalf("complete %v, but the last record is %q", r.Complete, recs[len(recs)-1].typ)
		}
		if r.Complete && r.TerminalReason != str(recs[len(recs)-1].data, "reason") {
			t.Fatalf("terminal reason %q, the record says %s", r.TerminalReason, recs[len(recs)-1].data["reason"])
		}
		if !r.Released {
			return
		}
		last := recs[len(recs)-1].data
		if !r.Complete || string(last["released"]) != "true" || str(last, "reason") != "completed" {
			t.Fatalf("released, but the terminated record says released %s reason %s", last["released"], last["reason"])
		}
		answer, allowed := "", false
		for _, x := range recs {
			switch x.typ {
			case TypeInferenceFinished, TypeSessionFinished:
				if str(x.data, "outcome") == "completed" {
					answer = str(x.data, "text_sha256")
				}
			case TypePolicyEvaluated:
				allowed = allowed || str(x.data, "decision") == "allow" && str(x.data, "text_sha256") == answer
			case TypeApprovalDecided:
				allowed = allowed || str(x.data, "decision") == "approve"
			}
		}
		if answer == "" || !allowed {
			t.Fatalf("released without a completed answer (%q) that an allow or an approve let out:\n%s", answer, templates)
		}
	})
}

func verifyBytesWith(data []byte, check sigCheck) *Report {
	r := &Report{Problems: []Problem{}}
	verifyDataWith(r, data, vectorKey(), VerifyOptions{}, check)
	return r
}

// FuzzReadEntries: `symbi audit show` reads a journal it does not verify — any bytes —
// and prints each line's seq, time, type and Facts. ReadEntries never panics, gives one
// entry per whole line (numbered from 1) and the torn tail's length; Facts of any data
// costs in proportion to it: docs/journal-format.md, "nested fields are flattened 8 levels
// deep (deeper ones shown as {…}) and names cut at 64 bytes, so a forged line costs no
// more than its size".
func FuzzReadEntries(f *testing.F) {
	// One line of a vector (whole vectors make each minimization take the fuzzer's minute).
	b, err := os.ReadFile(filepath.Join(vectorDir, "allowed.jsonl"))
	if err != nil {
		f.Fatal(err)
	}
	first, _, _ := bytes.Cut(b, []byte("\n"))
	f.Add(append(first, '\n'))
	for _, s := range []string{
		"", "\n", "x", "{}\n{\n", `{"payload":{"seq":1,"time":"t","type":"x","data":{"a":{"b":{"c":1}}}}}` + "\n",
		`{"payload":{"data":{"prompt":"secret","text":"t","k":"` + strings.Repeat("f", 64) + `"}}}` + "\n",
		`{"payload":{"data":{"a":[1,{"b":2},"c d",null,true]}}}` + "\n",
		`{"payload":{"data":[1]}}` + "\n",
		`{"Payload":{"TYPE":"x"}}` + "\n",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	path := filepath.Join(dir, "j.jsonl")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		entries, tail, err := ReadEntries(path)
		if err != nil {
			t.Fatalf("ReadEntries: %v", err)
		}
		whole := bytes.Count(data, []byte("\n"))
		if len(entries) != whole || tail != len(data)-(bytes.LastIndexByte(data, '\n')+1) {
			t.Fatalf("%d entries and a tail of %d for %d whole lines of %d bytes", len(entries), tail, whole, len(data))
		}
		for i, e := range entries {
			if e.Line != i+1 {
				t.Fatalf("entry %d numbered %d", i, e.Line)
			}
			facts := e.Facts()
			// Every byte of the data may be shown, escaped at most as strconv.Quote does, plus
			// a few bytes per member ("<n bytes>", "…"): never a multiple of its size per level.
			if limit := 4*len(e.Data) + 64; len(facts) > limit {
				t.Fatalf("line %d: facts of %d bytes for data of %d bytes (limit %d)", i+1, len(facts), len(e.Data), limit)
			}
		}
	})
}

// TestFactsCostsNoMoreThanItsSize: `symbi audit show` prints Facts of journals it does not
// verify, and a forged line costs no more than its size. Every flattened member repeats
// the whole dotted path above it — up to 7 names of 64 bytes — so a line whose deepest
// object holds many short members ("0":0, 6 bytes each) would be shown at ~460 bytes per
// member, ~49 times its size; Facts stops at a multiple of the data's size, saying "…".
func TestFactsCostsNoMoreThanItsSize(t *testing.T) {
	var b strings.Builder
	for i := range 7 {
		b.WriteString(`{"` + strings.Repeat(string(rune('a'+i)), 64) + `":`)
	}
	b.WriteString("{")
	for i := range 20000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"` + strconv.Itoa(i) + `":0`)
	}
	b.WriteString(strings.Repeat("}", 8))
	e := Entry{Data: json.RawMessage(b.String())}
	facts := e.Facts()
	if limit := 4*len(e.Data) + 64; len(facts) > limit || !strings.HasSuffix(facts, " …") {
		t.Fatalf("facts of %d bytes for data of %d bytes (%.0f×; want at most %d, ending in …)", len(facts), len(e.Data), float64(len(facts))/float64(len(e.Data)), limit)
	}
}
