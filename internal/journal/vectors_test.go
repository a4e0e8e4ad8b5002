package journal

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/journal from the fixed seed")

// vectorDir holds the published test vectors.
const vectorDir = "../../testdata/journal"

// vectorSeed is the Ed25519 seed that signs every vector (RFC 8032, test 1).
const vectorSeed = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"

// Run ids of the vectors.
const (
	allowedRun   = "0b7e8a52-6f1d-4c3a-9e2b-5d4c3b2a1f00"
	deniedRun    = "1c8f9b63-7a2e-4d4b-8f3c-6e5d4c3b2a11"
	crashedRun   = "2d9a0c74-8b3f-4e5c-9a4d-7f6e5d4c3b22"
	delegatedRun = "3e0b1d85-9c40-4f6d-8b5e-8a7f6e5d4c33"
	gatedRun     = "4f1c2e96-0d51-4a7e-9c6f-9b807f6e5d44"
)

// vectorCase is one entry of expected.json.
type vectorCase struct {
	File        string `json:"file"`
	RunID       string `json:"run_id,omitempty"`
	Head        string `json:"head,omitempty"`
	Records     int    `json:"records,omitempty"`
	Exit        int    `json:"exit"`
	Description string `json:"description"`
}

type expectedFile struct {
	Seed      string       `json:"seed"`
	PublicKey string       `json:"public_key"`
	Context   string       `json:"signature_context"`
	Vectors   []vectorCase `json:"vectors"`
}

var (
	allowedRunDef = run{agent: "greeter", prompt: "Say hello to <Ada> & \"friends\".", text: "Hello, Ada & friends!", allow: true}
	deniedRunDef  = run{agent: "greeter", prompt: "Print the deploy key.", text: "The key is AKIA-SECRET.", allow: false}
	crashedRunDef = run{agent: "auditor", prompt: "Summarize the log.", text: "", allow: true}
)

// buildVectors writes the three genuine runs with the vector key and derives the others.
func buildVectors(t *testing.T) (map[string][]byte, expectedFile) {
	seed, _ := hex.DecodeString(vectorSeed)
	s := storeWithSeed(t, seed)
	allowedW := writeRun(t, s, allowedRunDef, allowedRun, -1)
	writeRun(t, s, deniedRunDef, deniedRun, -1)
	writeRun(t, s, crashedRunDef, crashedRun, 3)
	dr := delegatedRecords()
	writeRecords(t, s, "coder", delegatedRun, dr)
	gr := gatedRecords()
	writeRecords(t, s, "greeter", gatedRun, gr)
	gated := mustRead(t, filepath.Join(s.Dir(), agentID("greeter")+"."+gatedRun+".jsonl"))
	delegated := mustRead(t, filepath.Join(s.Dir(), agentID("coder")+"."+delegatedRun+".jsonl"))
	allowed := mustRead(t, filepath.Join(s.Dir(), agentID("greeter")+"."+allowedRun+".jsonl"))
	denied := mustRead(t, filepath.Join(s.Dir(), agentID("greeter")+"."+deniedRun+".jsonl"))
	crashed := mustRead(t, filepath.Join(s.Dir(), agentID("auditor")+"."+crashedRun+".jsonl"))
	al, dl := splitLines(allowed), splitLines(denied)

	tamperedPayload := bytes.Clone(allowed)
	i := bytes.Index(tamperedPayload, []byte(`"http_status":200`))
	tamperedPayload[i+len(`"http_status":20`)] = '1'

	sigLine := bytes.Clone(al[1])
	j := bytes.LastIndex(sigLine, []byte(`"signature":"`)) + len(`"signature":"`) + 10
	if sigLine[j] == 'A' {
		sigLine[j] = 'B'
	} else {
		sigLine[j] = 'A'
	}
	tamperedSig := joinLines(al[0], sigLine, al[2], al[3], al[4])

	// Impossible stories, signed with the vector key: each verifies line by line but
	// tells a run that cannot have happened.
	key := ed25519.NewKeyFromSeed(seed)
	ar := allowedRunDef.records()
	other := ar[3].(PolicyEvaluated)
	other.TextSHA256 = sum("other text")
	deny := ar[3].(PolicyEvaluated)
	deny.Decision = "deny"
	impossible := map[string][]Record{
		"impossible/released-after-deny.jsonl":       {ar[0], ar[1], ar[2], deny, ar[4]},
		"impossible/released-without-decision.jsonl": {ar[0], ar[1], ar[2], ar[4]},
		"impossible/decision-before-answer.jsonl":    {ar[0], ar[1], ar[3], ar[2], ar[4]},
		"impossible/decision-on-other-text.jsonl":    {ar[0], ar[1], ar[2], other, ar[4]},
		"impossible/completed-not-released.jsonl":    {ar[0], ar[1], ar[2], ar[3], Terminated{Reason: "completed", DurationMS: 42}},
		"impossible/two-requests.jsonl":              {ar[0], ar[1], ar[1], ar[2], ar[3], ar[4]},
	}
	// Delegated: a file read nothing allowed (the allow removed), and one after a deny.
	deniedRead := dr[4].(PermissionDecided)
	deniedRead.Decision = "deny"
	delegatedImpossible := map[string][]Record{
		"impossible/read-without-permission.jsonl": append(slices.Clone(dr[:4]), dr[5:]...),
		"impossible/read-after-deny.jsonl":         append(append(slices.Clone(dr[:4]), deniedRead), dr[5:]...),
	}
	files := map[string][]byte{
		"allowed.jsonl":            allowed,
		"denied.jsonl":             denied,
		"crashed.jsonl":            crashed,
		"torn.jsonl":               append(joinLines(al[:4]...), al[4][:len(al[4])/2]...),
		"tampered-payload.jsonl":   tamperedPayload,
		"tampered-signature.jsonl": tamperedSig,
		"swapped.jsonl":            joinLines(al[0], al[2], al[1], al[3], al[4]),
		"spliced.jsonl":            joinLines(al[0], al[1], dl[2], al[3], al[4]),
		"deleted.jsonl":            joinLines(al[0], al[1], al[3], al[4]),
		"truncated.jsonl":          joinLines(al[:3]...),
		// A governed directory as the writer leaves it, after the allowed run's journal
		// was copied over the denied run's file.
		"governed/" + FileName(agentID("greeter"), allowedRun): allowed,
		"governed/" + FileName(agentID("greeter"), deniedRun):  allowed,
		"governed/" + FileName(agentID("auditor"), crashedRun): crashed,
	}
	for name, recs := range impossible {
		files[name] = forge(key, allowedRunDef.agent, allowedRun, recs)
	}
	files["delegated.jsonl"] = delegated
	files["gated.jsonl"] = gated
	rejected := gr[5].(ApprovalDecided)
	rejected.Decision = "reject"
	gatedImpossible := map[string][]Record{
		// The approval removed: a release after a deny that nobody approved.
		"impossible/released-without-approval.jsonl": {gr[0], gr[1], gr[2], gr[3], gr[4], gr[6]},
		// Rejected, yet released.
		"impossible/released-after-rejection.jsonl": {gr[0], gr[1], gr[2], gr[3], gr[4], rejected, gr[6]},
	}
	for name, recs := range gatedImpossible {
		files[name] = forge(key, "greeter", gatedRun, recs)
	}
	for name, recs := range delegatedImpossible {
		files[name] = forge(key, "coder", delegatedRun, recs)
	}
	rc := allowedW.Receipt()
	exp := expectedFile{
		Seed:      vectorSeed,
		PublicKey: hex.EncodeToString(s.PublicKey()),
		Context:   SignatureContext,
		Vectors: []vectorCase{
			{File: "allowed.jsonl", Exit: 0, Description: "a complete run whose response the policy allowed"},
			{File: "allowed.jsonl", RunID: allowedRun, Head: rc.Head, Records: rc.Records, Exit: 0, Description: "the same run checked against its run id and receipt"},
			{File: "allowed.jsonl", RunID: deniedRun, Exit: 1, Description: "the allowed run checked against another run's id"},
			{File: "denied.jsonl", Exit: 0, Description: "a complete run whose response the policy denied (text withheld)"},
			{File: "crashed.jsonl", Exit: 2, Description: "a crashed run: three valid records, no terminated"},
			{File: "torn.jsonl", Exit: 2, Description: "the allowed run with its last line torn: an unverified tail"},
			{File: "truncated.jsonl", Exit: 2, Description: "the allowed run cut after its third line"},
			{File: "truncated.jsonl", Head: rc.Head, Records: rc.Records, Exit: 1, Description: "the cut run checked against the original receipt"},
			{File: "tampered-payload.jsonl", Exit: 1, Description: "one payload byte edited (http_status 200 to 201)"},
			{File: "tampered-signature.jsonl", Exit: 1, Description: "one signature character edited"},
			{File: "swapped.jsonl", Exit: 1, Description: "lines 2 and 3 swapped"},
			{File: "spliced.jsonl", Exit: 1, Description: "line 3 replaced by line 3 of the denied run"},
			{File: "deleted.jsonl", Exit: 1, Description: "line 3 deleted"},
			{File: "impossible/released-after-deny.jsonl", Exit: 1, Description: "every line signed and chained, but terminated says released after the policy denied"},
			{File: "impossible/released-without-decision.jsonl", Exit: 1, Description: "released with no policy_evaluated at all"},
			{File: "impossible/decision-before-answer.jsonl", Exit: 1, Description: "policy_evaluated before inference_finished: a decision on text not yet received"},
			{File: "impossible/decision-on-other-text.jsonl", Exit: 1, Description: "the policy judged text whose hash is not the received text's"},
			{File: "impossible/completed-not-released.jsonl", Exit: 1, Description: "reason completed without a release"},
			{File: "impossible/two-requests.jsonl", Exit: 1, Description: "two inference_requested records: one run makes one request"},
			{File: "delegated.jsonl", Exit: 0, Description: "a complete delegated run: a session, a thought, a tool call, a file read after an allow, a command denied, a plan, the answer released"},
			{File: "impossible/read-without-permission.jsonl", Exit: 1, Description: "the delegated run with its permission_decided removed: a file read nothing allowed"},
			{File: "impossible/read-after-deny.jsonl", Exit: 1, Description: "the delegated run with the read's permission denied, yet the file read"},
			{File: "gated.jsonl", Exit: 0, Description: "a run whose answer a @gate(\"human\") forbid held: approval_requested, then approval_decided (approve by another caller), the text released"},
			{File: "impossible/released-without-approval.jsonl", Exit: 1, Description: "the gated run with its approval_decided removed: released after a deny nobody approved"},
			{File: "impossible/released-after-rejection.jsonl", Exit: 1, Description: "the gated run rejected at the gate, yet released"},
			{File: "governed/" + FileName(agentID("greeter"), allowedRun), Exit: 0, Description: "the allowed run under the name its writer gave it: <agent_id>.<run_id>.jsonl"},
			{File: "governed/" + FileName(agentID("greeter"), deniedRun), Exit: 1, Description: "the allowed run copied over the denied run's file: the name does not match the records"},
			{File: "governed/" + FileName(agentID("auditor"), crashedRun), Exit: 2, Description: "the crashed run under its own name"},
		},
	}
	return files, exp
}

func splitLines(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		out = append(out, b[:i+1])
		b = b[i+1:]
	}
	return out
}

func joinLines(lines ...[]byte) []byte { return bytes.Join(lines, nil) }

// TestVectors regenerates the vectors from the fixed seed, compares them with
// testdata/journal (rewritten with -update), and verifies each with its expected outcome.
func TestVectors(t *testing.T) {
	files, exp := buildVectors(t)
	expJSON, err := json.MarshalIndent(exp, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	files["expected.json"] = append(expJSON, '\n')
	files["seed.hex"] = []byte(vectorSeed + "\n")
	if *update {
		for name, b := range files {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(vectorDir, name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(vectorDir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(vectorDir, name))
		if err != nil {
			t.Fatalf("%v (run go test ./internal/journal -run TestVectors -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the regenerated vector (run with -update if the change is deliberate)", name)
		}
	}
	pub, _ := hex.DecodeString(exp.PublicKey)
	for _, c := range exp.Vectors {
		r := Verify(filepath.Join(vectorDir, c.File), ed25519.PublicKey(pub), VerifyOptions{RunID: c.RunID, Head: c.Head, Records: c.Records})
		if r.ExitCode() != c.Exit {
			t.Errorf("%s (%s): exit %d, want %d; report %s", c.File, c.Description, r.ExitCode(), c.Exit, reportJSON(r))
		}
	}
	// The seed really is the key that signed them.
	seed, _ := hex.DecodeString(vectorSeed)
	if !bytes.Equal(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey), pub) {
		t.Error("public key in expected.json does not derive from the seed")
	}
}
