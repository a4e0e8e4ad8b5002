package journal

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestContractSignatureDomain: "S is … the Ed25519 signature over the bytes
// `symbi-journal-v1\n` followed by the exact bytes of P (a fixed context prefix, so a
// journal signature can never be replayed as any other kind of signed message)". A line
// whose signature covers P alone, or P under another log's context, does not verify.
func TestContractSignatureDomain(t *testing.T) {
	seed, _ := hex.DecodeString(vectorSeed)
	key := ed25519.NewKeyFromSeed(seed)
	pub := vectorKey()
	p := `{"v":1,"run_id":"r","seq":0,"prev":"` + ZeroHash + `","time":"2026-01-02T03:04:05.000Z","agent_id":"a","type":"started","data":{}}`
	sealed := func(msg string) []byte {
		sig := ed25519.Sign(key, []byte(msg))
		return []byte(`{"payload":` + p + `,"signature":"` + base64.StdEncoding.EncodeToString(sig) + "\"}\n")
	}
	if r := verifyBytes(sealed(SignatureContext+p), pub, VerifyOptions{}); r.ExitCode() != 2 {
		t.Fatalf("a line signed over the context and P: %s", reportJSON(r))
	}
	for name, msg := range map[string]string{
		"P alone":                 p,
		"the ledger's context":    "symbi-ledger-v1\n" + p,
		"context without newline": "symbi-journal-v1" + p,
		"context v2":              "symbi-journal-v2\n" + p,
	} {
		if r := verifyBytes(sealed(msg), pub, VerifyOptions{}); r.ExitCode() != 1 || !strings.Contains(reportJSON(r), "signature does not verify") {
			t.Errorf("signed over %s: %s", name, reportJSON(r))
		}
	}
}

// TestContractAgentIDConstant: the verifier checks "`agent_id` constant". A journal of
// one run whose later line names another agent, every line signed and chained, is invalid.
func TestContractAgentIDConstant(t *testing.T) {
	seed, _ := hex.DecodeString(vectorSeed)
	key := ed25519.NewKeyFromSeed(seed)
	recs := allowedRunDef.records()
	good := forge(key, "greeter", allowedRun, recs)
	if r := verifyBytes(good, vectorKey(), VerifyOptions{}); r.ExitCode() != 0 {
		t.Fatalf("forged genuine run: %s", reportJSON(r))
	}
	// Re-sign line 3 (seq 2) with another agent_id and chain the rest after it.
	lines := splitLines(good)
	var out []byte
	prev := ZeroHash
	for i, l := range lines {
		p := l[len(linePrefix) : len(l)-len(lineSuffix)-sigB64Len-len(sigPrefix)]
		ps := string(p)
		ps = strings.Replace(ps, `"prev":"`+prevOf(lines, i)+`"`, `"prev":"`+prev+`"`, 1)
		if i == 2 {
			ps = strings.Replace(ps, `"agent_id":"`+agentID("greeter")+`"`, `"agent_id":"`+agentID("auditor")+`"`, 1)
		}
		line := Seal(key, SignatureContext, []byte(ps))
		out = append(out, line...)
		prev = lineHash(line)
	}
	r := verifyBytes(out, vectorKey(), VerifyOptions{})
	if r.ExitCode() != 1 || !strings.Contains(reportJSON(r), `agent_id`) {
		t.Errorf("a line of another agent: %s", reportJSON(r))
	}
	for _, pr := range r.Problems {
		if pr.Line != 3 {
			t.Errorf("problem on line %d (want only line 3): %s", pr.Line, pr.Message)
		}
	}
}

func prevOf(lines [][]byte, i int) string {
	if i == 0 {
		return ZeroHash
	}
	return lineHash(lines[i-1])
}

// TestContractRecordMembers: each record type holds (at least) what the format's
// table lists, even when the value is zero or empty; the envelope holds exactly v, run_id,
// seq, prev, time, agent_id, type and data, in that order, P is embedded verbatim (the
// signature verifies over the bytes between the fixed parts).
func TestContractRecordMembers(t *testing.T) {
	_, w := createJournal(t, "run-members")
	recs := []Record{
		Started{},
		InferenceRequested{CallID: "c"},
		InferenceFinished{CallID: "c", Outcome: "completed"},
		PolicyEvaluated{Decision: "deny"},
		Terminated{Reason: "policy_denied"},
	}
	for _, r := range recs {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		TypeStarted: {"agent", "file", "source_sha256", "declaration_sha256", "mode", "surface", "server_version",
			"max_output_tokens", "deadline_ms", "provider", "model", "policy_mode", "policy_digest",
			"prompt_sha256", "prompt_bytes", "instructions_sha256", "instructions_bytes", "inline_policies", "inline_policies_sha256"},
		TypeInferenceRequested: {"call_id", "request_sha256", "request_bytes", "max_tokens", "deadline_ms"},
		TypeInferenceFinished: {"call_id", "outcome", "http_status", "response_sha256", "response_bytes", "text_sha256",
			"finish_reason", "usage"},
		TypePolicyEvaluated: {"action", "decision", "policy_ids", "errors", "text_sha256"},
		TypeTerminated:      {"reason", "released", "duration_ms"},
	}
	data := mustRead(t, w.Path())
	lines := splitLines(data)
	if len(lines) != len(recs) {
		t.Fatalf("%d lines", len(lines))
	}
	for i, l := range lines {
		p := l[len(linePrefix) : len(l)-len(lineSuffix)-sigB64Len-len(sigPrefix)]
		dec := json.NewDecoder(bytes.NewReader(p))
		dec.UseNumber()
		tok, _ := dec.Token()
		if tok != json.Delim('{') {
			t.Fatalf("line %d: P is not an object", i+1)
		}
		var order []string
		var typ string
		var d map[string]json.RawMessage
		for dec.More() {
			k, _ := dec.Token()
			order = append(order, k.(string))
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				t.Fatal(err)
			}
			switch k {
			case "type":
				json.Unmarshal(raw, &typ)
			case "data":
				json.Unmarshal(raw, &d)
			}
		}
		if got := strings.Join(order, ","); got != "v,run_id,seq,prev,time,agent_id,type,data" {
			t.Errorf("line %d: members %s", i+1, got)
		}
		for _, k := range want[typ] {
			if _, ok := d[k]; !ok {
				t.Errorf("%s record lacks %q: %s", typ, k, p)
			}
		}
		for _, k := range []string{"inline_policies", "policy_ids", "errors"} {
			if v, ok := d[k]; ok && string(v) != "[]" {
				t.Errorf("%s record's empty %s is %s, want []", typ, k, v)
			}
		}
		sig, _ := base64.StdEncoding.DecodeString(string(l[len(l)-len(lineSuffix)-sigB64Len : len(l)-len(lineSuffix)]))
		if !ed25519.Verify(vectorKeyOf(t, w), append([]byte(SignatureContext), p...), sig) {
			t.Errorf("line %d: signature does not verify over the context and the verbatim P", i+1)
		}
	}
	r := Verify(w.Path(), vectorKeyOf(t, w), VerifyOptions{RunID: "run-members", Head: w.Receipt().Head, Records: 5})
	if r.ExitCode() != 0 || r.TerminalReason != "policy_denied" || r.Released {
		t.Errorf("writer's own journal: %s", reportJSON(r))
	}
}

// vectorKeyOf returns the public key the writer w signs with.
func vectorKeyOf(t *testing.T, w *Writer) ed25519.PublicKey {
	t.Helper()
	return w.key.Public().(ed25519.PublicKey)
}

// TestContractFiftyLineVerifier: "An auditor with a journal file and a public key, and
// nothing else of ours, must be able to decide what happened … written from the project's
// own format document." A verifier written from the format's Verification section alone
// (no state machine) decides every published vector that is not an impossible story as
// expected.json says, and agrees with Verify on the report's records, tail and status.
func TestContractFiftyLineVerifier(t *testing.T) {
	var exp expectedFile
	if err := json.Unmarshal(mustRead(t, filepath.Join(vectorDir, "expected.json")), &exp); err != nil {
		t.Fatal(err)
	}
	pub, _ := hex.DecodeString(exp.PublicKey)
	n := 0
	for _, v := range exp.Vectors {
		if strings.HasPrefix(v.File, "impossible/") || strings.Contains(v.File, "/") {
			continue
		}
		n++
		data := mustRead(t, filepath.Join(vectorDir, v.File))
		code, records, tail := specVerify(data, pub, v.RunID, v.Head, v.Records)
		if code != v.Exit {
			t.Errorf("%s (%s): the format-only verifier says %d, expected.json %d", v.File, v.Description, code, v.Exit)
		}
		r := Verify(filepath.Join(vectorDir, v.File), pub, VerifyOptions{RunID: v.RunID, Head: v.Head, Records: v.Records})
		if r.ExitCode() != code || r.Records != records || r.TailBytes != tail {
			t.Errorf("%s: Verify says exit %d, %d records, tail %d; the format-only verifier %d, %d, %d", v.File, r.ExitCode(), r.Records, r.TailBytes, code, records, tail)
		}
	}
	if n < 10 {
		t.Fatalf("only %d vectors checked", n)
	}
}

// specVerify is the format's verification, as an outsider writes it: exit 0, 1 or 2.
func specVerify(data, pub []byte, runID, head string, want int) (code, records, tail int) {
	prev, first := strings.Repeat("0", 64), map[string]string{}
	terminated, bad := false, false
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			tail = len(data)
			break
		}
		line := data[:i+1]
		data = data[i+1:]
		seq := records
		records++
		var env struct {
			Payload   json.RawMessage `json:"payload"`
			Signature string          `json:"signature"`
		}
		if len(line) > 1<<20 || json.Unmarshal(line, &env) != nil {
			bad = true
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(env.Signature)
		if err != nil || !ed25519.Verify(pub, append([]byte("symbi-journal-v1\n"), env.Payload...), sig) {
			bad = true
			continue
		}
		var p struct {
			V       json.Number `json:"v"`
			RunID   string      `json:"run_id"`
			Seq     json.Number `json:"seq"`
			Prev    string      `json:"prev"`
			AgentID string      `json:"agent_id"`
			Type    string      `json:"type"`
		}
		if json.Unmarshal(env.Payload, &p) != nil || p.V != "1" || p.Seq.String() != itoa(seq) || p.Prev != prev || terminated ||
			(runID != "" && p.RunID != runID) || (seq == 0) != (p.Type == "started") {
			bad = true
		}
		if seq == 0 {
			first["run"], first["agent"] = p.RunID, p.AgentID
		} else if p.RunID != first["run"] || p.AgentID != first["agent"] {
			bad = true
		}
		terminated = terminated || p.Type == "terminated"
		h := sha256.Sum256(line)
		prev = hex.EncodeToString(h[:])
	}
	if head != "" && (head != prev || want != records) {
		bad = true
	}
	switch {
	case bad:
		return 1, records, tail
	case terminated && tail == 0:
		return 0, records, tail
	}
	return 2, records, tail
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestContractVerifyFIFO: a journal is read as a regular file only — a FIFO named like
// one is refused at once (exit 1), alone or in a directory, never blocked on.
func TestContractVerifyFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "x.jsonl")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := Verify(fifo, vectorKey(), VerifyOptions{}); r.ExitCode() != 1 || !strings.Contains(reportJSON(r), "not a regular file") {
		t.Errorf("fifo: %s", reportJSON(r))
	}
	reports, err := VerifyDir(dir, vectorKey())
	if err != nil || len(reports) != 1 || reports[0].ExitCode() != 1 {
		t.Errorf("fifo in a directory: %v %+v", err, reports)
	}
}
