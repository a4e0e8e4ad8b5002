package invoke

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"symbi/internal/digest"
	"symbi/internal/errcode"
	"symbi/internal/inference"
	"symbi/internal/journal"
	"symbi/internal/loopback"
	"symbi/internal/policy"
)

// journalFiles lists the journal files of the project at dir.
func journalFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, ".symbiont", "governed", "*.jsonl"))
	return m
}

// TestContractRequestBodyOverLimitIsPreflight: a request body of more than 1 MiB on the
// wire is refused before anything is sent or journaled — limit_exceeded, no audit
// reference: here a definition under 1 MiB whose JSON encoding passes it (every '"'
// becomes '\"').
func TestContractRequestBodyOverLimitIsPreflight(t *testing.T) {
	body := "agent helper {\n  // " + strings.Repeat(`"`, 600<<10) + "\n  capabilities = [\"answer\"]\n}\n"
	if len(body) > 1<<20 {
		t.Fatalf("fixture %d bytes: over the DSL file limit", len(body))
	}
	f := newFixture(t, map[string]string{
		"agents/helper.symbi":    body,
		"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n",
	}, nil)
	_, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "hi"}, nil)
	var ie *Error
	if !errors.Is(err, errcode.LimitExceeded) || !errors.As(err, &ie) {
		t.Fatalf("err %v, want limit_exceeded", err)
	}
	if ie.Audit != nil {
		t.Errorf("preflight refusal carries an audit reference: %+v", ie.Audit)
	}
	if n := len(journalFiles(t, f.dir)); n != 0 {
		t.Errorf("%d journals after a request-size refusal, want 0", n)
	}
	if n := len(f.model.Requests()); n != 0 {
		t.Errorf("the model received %d requests, want 0", n)
	}
}

// TestContractDeclarationSelection: selecting the declaration. Several agents, none named
// like the stem, or duplicates → refused_definition (preflight: no journal); several with
// one named like the stem → that one; one agent under another name (a filename alias) →
// its declared name, and agent_id is the declared name's.
func TestContractDeclarationSelection(t *testing.T) {
	f := newFixture(t, map[string]string{
		"agents/pair.symbi":      "agent first {}\nagent second {}\n",
		"agents/second.symbi":    "agent first {}\nagent second {}\n",
		"agents/twice.symbi":     "agent twice {}\nagent twice {}\n",
		"agents/alias.symbi":     "agent declared_name {}\n",
		"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n",
	}, nil)
	for _, stem := range []string{"pair", "twice"} {
		_, err := f.runner.Invoke(context.Background(), Request{Agent: stem, Prompt: "hi"}, nil)
		var ie *Error
		if !errors.Is(err, errcode.RefusedDefinition) || !errors.As(err, &ie) || ie.Audit != nil {
			t.Errorf("%s: err %v, want refused_definition without audit", stem, err)
		}
	}
	if n := len(journalFiles(t, f.dir)); n != 0 {
		t.Fatalf("%d journals after selection refusals", n)
	}
	for stem, want := range map[string]string{"second": "second", "alias": "declared_name"} {
		res, err := f.runner.Invoke(context.Background(), Request{Agent: stem, Prompt: "hi"}, nil)
		if err != nil {
			t.Fatalf("%s: %v", stem, err)
		}
		if res.Agent != want || res.AgentID != policy.AgentID(want) {
			t.Errorf("%s: agent %q id %q, want %q %q", stem, res.Agent, res.AgentID, want, policy.AgentID(want))
		}
		if base := filepath.Base(res.Audit.Path); !strings.HasPrefix(base, policy.AgentID(want)+"."+res.Audit.RunID) {
			t.Errorf("%s: journal file %s, want <agent_id>.<run_id>.jsonl", stem, base)
		}
	}
}

// TestContractStartedRecord: the started record holds the limits in force (4,096 tokens;
// deadline min(120 s, with timeout)), provider and model, policy mode and digest, the
// digests and lengths of prompt and caller instructions; and inference_requested its
// own, the records in the order of writes.
func TestContractStartedRecord(t *testing.T) {
	f := newFixture(t, map[string]string{
		"agents/helper.symbi":    "agent helper {\n  with timeout = 7.seconds {}\n}\n",
		"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n",
		"AGENTS.md":              "<!-- agents-md:auto-start -->\nG\n<!-- agents-md:auto-end -->\n",
	}, nil)
	res, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "the prompt", SystemPrompt: "sp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	recs := payloads(t, res.Audit.Path)
	want := []string{"started", "inference_requested", "inference_finished", "policy_evaluated", "terminated"}
	if len(recs) != len(want) {
		t.Fatalf("%d records", len(recs))
	}
	for i, r := range recs {
		if r.Type != want[i] {
			t.Fatalf("record %d is %s, want %s", i, r.Type, want[i])
		}
	}
	var st journal.Started
	if err := json.Unmarshal(recs[0].Data, &st); err != nil {
		t.Fatal(err)
	}
	instr := "Project guidance (from AGENTS.md):\nG\n\nCaller system_prompt:\nsp"
	switch {
	case st.MaxOutputTokens != 4096, st.DeadlineMS != 7000:
		t.Errorf("limits %d tokens %d ms, want 4096 and 7000", st.MaxOutputTokens, st.DeadlineMS)
	case st.Provider != "openai" || st.Model != "test-model":
		t.Errorf("provider %q model %q", st.Provider, st.Model)
	case st.PolicyMode != "cedar" || st.PolicyDigest == "":
		t.Errorf("policy mode %q digest %q", st.PolicyMode, st.PolicyDigest)
	case st.Mode != "text_response" || st.Surface != "mcp-server":
		t.Errorf("mode %q surface %q", st.Mode, st.Surface)
	case st.PromptSHA256 != digest.SHA256Hex([]byte("the prompt")) || st.PromptBytes != 10:
		t.Errorf("prompt digest %q bytes %d", st.PromptSHA256, st.PromptBytes)
	case st.InstructionsSHA256 != digest.SHA256Hex([]byte(instr)) || st.InstructionsBytes != int64(len(instr)):
		t.Errorf("instructions digest %q bytes %d (journaled %q)", st.InstructionsSHA256, st.InstructionsBytes, st.Instructions)
	}
	var rq journal.InferenceRequested
	json.Unmarshal(recs[1].Data, &rq)
	if rq.MaxTokens != 4096 || rq.DeadlineMS != 7000 {
		t.Errorf("inference_requested %+v", rq)
	}
}

// TestContractNoHiddenRetry: one journaled request, one call — a connection reset without
// an answer is inference_failed after exactly one request.
func TestContractNoHiddenRetry(t *testing.T) {
	var hits atomic.Int32
	f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Fault: loopback.FaultReset}))
	f.model.OnRequest(func(loopback.Request) { hits.Add(1) })
	_, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "hi"}, nil)
	var ie *Error
	if !errors.Is(err, errcode.InferenceFailed) || !errors.As(err, &ie) || ie.Audit == nil {
		t.Fatalf("err %v, want inference_failed with audit", err)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the provider received %d requests, want exactly 1", n)
	}
	verifyComplete(t, ie.Audit)
}

// TestContractResponseOverLimit: a response body of more than 4 MiB is an error, never
// buffered unbounded — the run records inference_finished (error) with at most 4 MiB + 1
// read, and ends inference_failed with the audit reference.
func TestContractResponseOverLimit(t *testing.T) {
	f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Fault: loopback.FaultHuge}))
	_, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "hi"}, nil)
	var ie *Error
	if !errors.Is(err, errcode.InferenceFailed) || !errors.As(err, &ie) || ie.Audit == nil {
		t.Fatalf("err %v, want inference_failed with audit", err)
	}
	recs := payloads(t, ie.Audit.Path)
	var fin journal.InferenceFinished
	json.Unmarshal(recs[2].Data, &fin)
	if fin.Outcome != "error" || fin.ResponseBytes > inference.MaxResponseBytes+1 || fin.HTTPStatus != 200 {
		t.Errorf("inference_finished %+v", fin)
	}
	verifyComplete(t, ie.Audit)
}

// TestContractPromptLimitIsBytes: prompt and system_prompt are each at most 64 KiB,
// counted in bytes — exactly 64 KiB of multi-byte text is accepted, one byte more is not.
func TestContractPromptLimitIsBytes(t *testing.T) {
	f := newFixture(t, nil, nil)
	at := strings.Repeat("é", 32<<10) // 65,536 bytes, 32,768 characters
	if _, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: at, SystemPrompt: at}, nil); err != nil {
		t.Fatalf("64 KiB each: %v", err)
	}
	over := at + "x"
	for _, req := range []Request{{Agent: "helper", Prompt: over}, {Agent: "helper", Prompt: "hi", SystemPrompt: over}} {
		if _, err := f.runner.Invoke(context.Background(), req, nil); !errors.Is(err, errcode.LimitExceeded) {
			t.Errorf("65,537 bytes: %v, want limit_exceeded", err)
		}
	}
}

// TestContractGuidanceCapIsCharacters: the AGENTS.md generated section in the caller
// instructions is capped at 2,000 characters, not bytes: 2,000 two-byte characters reach
// the model whole, the 2,001st does not.
func TestContractGuidanceCapIsCharacters(t *testing.T) {
	section := strings.Repeat("é", 2000) + "Z"
	f := newFixture(t, map[string]string{
		"agents/helper.symbi":    "agent helper {}\n",
		"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n",
		"AGENTS.md":              "<!-- agents-md:auto-start -->\n" + section + "\n<!-- agents-md:auto-end -->\n",
	}, nil)
	if _, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "hi"}, nil); err != nil {
		t.Fatal(err)
	}
	var body struct {
		Messages []struct{ Role, Content string } `json:"messages"`
	}
	if err := json.Unmarshal(f.model.Requests()[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Messages) != 3 {
		t.Fatalf("%d messages", len(body.Messages))
	}
	m := body.Messages[1].Content
	if !strings.Contains(m, strings.Repeat("é", 2000)) || strings.Contains(m, "Z") {
		t.Errorf("guidance not cut at 2,000 characters: %d é, Z present %v", strings.Count(m, "é"), strings.Contains(m, "Z"))
	}
}
