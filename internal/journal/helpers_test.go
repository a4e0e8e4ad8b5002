package journal

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"symbi/internal/proctest"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"
)

// TestMain lets the test binary act as a child process for the tests that need separate
// processes (concurrent key creators, a real RLIMIT_FSIZE failure).
func TestMain(m *testing.M) {
	switch os.Getenv("JOURNAL_TEST_CHILD") {
	case "key":
		os.Exit(childKey(os.Getenv("JOURNAL_TEST_DIR")))
	case "fsize":
		os.Exit(childFsize(os.Getenv("JOURNAL_TEST_DIR")))
	case "opening":
		os.Exit(childOpening(os.Getenv("JOURNAL_TEST_DIR")))
	}
	os.Exit(m.Run())
}

// newProject returns a fresh project directory and its pinned descriptor.
func newProject(t testing.TB) (string, *os.File) {
	t.Helper()
	dir := t.TempDir()
	return dir, openRoot(t, dir)
}

func openRoot(t testing.TB, dir string) *os.File {
	t.Helper()
	root, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root
}

// openStore opens (creating) the store of a project.
func openStore(t testing.TB, root *os.File) *Store {
	t.Helper()
	s, err := OpenStore(root, StoreOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fixedClock returns a clock that starts at start and advances 7 ms per call.
func fixedClock(start time.Time) func() time.Time {
	n := 0
	return func() time.Time {
		n++
		return start.Add(time.Duration(n) * 7 * time.Millisecond)
	}
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// run describes the records of one sample run.
type run struct {
	agent, prompt, text string
	allow               bool
}

// records returns the five records of a sample run.
func (r run) records() []Record {
	decision, reason, ids := "deny", "policy_denied", []string{"forbid-secrets"}
	if r.allow {
		decision, reason, ids = "allow", "completed", []string{"policy0"}
	}
	req := `{"model":"m","messages":[...]}`
	resp := `{"choices":[{"message":{"content":` + fmt.Sprintf("%q", r.text) + `}}]}`
	return []Record{
		Started{Agent: r.agent, File: "agents/" + r.agent + ".symbi", SourceSHA256: sum("source"), DeclarationSHA256: sum("decl"),
			Mode: "text_response", Surface: "mcp-server", ServerVersion: "test", MaxOutputTokens: 4096, DeadlineMS: 120000,
			Provider: "openai", Model: "m", InlinePolicies: []string{"p1"}, InlinePoliciesSHA256: sum("p1"), PolicyMode: "cedar",
			PolicyDigest: sum("policies"), PromptSHA256: sum(r.prompt), PromptBytes: int64(len(r.prompt)),
			InstructionsSHA256: sum(""), Prompt: r.prompt},
		InferenceRequested{CallID: "call-1", RequestSHA256: sum(req), RequestBytes: int64(len(req)), MaxTokens: 4096, DeadlineMS: 120000},
		InferenceFinished{CallID: "call-1", Outcome: "completed", HTTPStatus: 200, ResponseSHA256: sum(resp), ResponseBytes: int64(len(resp)),
			TextSHA256: sum(r.text), TextBytes: int64(len(r.text)), FinishReason: "stop", Usage: Usage{InputTokens: 12, OutputTokens: 5}, Text: r.text},
		PolicyEvaluated{Action: "respond", Decision: decision, PolicyIDs: ids, TextSHA256: sum(r.text), TextBytes: int64(len(r.text))},
		Terminated{Reason: reason, Released: r.allow, DurationMS: 42},
	}
}

// agentID is the UUIDv5 (URL namespace) of symbi://response/<name>.
func agentID(name string) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("symbi://response/"+name)).String()
}

// writeRun writes n records of r (all when n < 0) to a new journal with a fixed clock and
// returns the writer (synced, closed).
func writeRun(t testing.TB, s *Store, r run, runID string, n int) *Writer {
	t.Helper()
	recs := r.records()
	if n >= 0 {
		recs = recs[:n]
	}
	return writeRecords(t, s, r.agent, runID, recs)
}

// writeRecords writes recs to a new journal of agent with a fixed clock and returns the
// writer (synced, closed).
func writeRecords(t testing.TB, s *Store, agent, runID string, recs []Record) *Writer {
	t.Helper()
	w, err := s.Create(agentID(agent), runID)
	if err != nil {
		t.Fatal(err)
	}
	w.now = fixedClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	for _, rec := range recs {
		if err := w.Append(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w
}

// storeWithSeed creates a project whose key is the given seed.
func storeWithSeed(t testing.TB, seed []byte) *Store {
	t.Helper()
	dir, root := newProject(t)
	gov := filepath.Join(dir, ".symbiont", "governed")
	if err := os.MkdirAll(gov, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gov, KeyFileName), seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return openStore(t, root)
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// verifyBytes verifies journal bytes held in memory.
func verifyBytes(data []byte, pub ed25519.PublicKey, opts VerifyOptions) *Report {
	r := &Report{Problems: []Problem{}}
	verifyData(r, data, pub, opts)
	return r
}

func reportJSON(r *Report) string {
	b, _ := json.Marshal(r)
	return string(b)
}

// forge signs recs as one run's journal with key, chaining them as the writer does but
// without its checks — the only way to make the impossible stories the verifier must
// refuse.
func forge(key ed25519.PrivateKey, agent, runID string, recs []Record) []byte {
	w := newWriter(nil, "", key, agentID(agent), runID)
	w.now = fixedClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	var out []byte
	for _, r := range recs {
		line, err := w.line(r)
		if err != nil {
			panic(err)
		}
		out = append(out, line...)
		w.seq++
		w.prev = lineHash(line)
	}
	return out
}

// createJournal makes a fresh project and store, and a journal of runID in it; the
// writer is closed when the test ends.
func createJournal(t testing.TB, runID string) (*Store, *Writer) {
	t.Helper()
	_, root := newProject(t)
	s := openStore(t, root)
	w, err := s.Create("agent", runID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return s, w
}

// delegatedRecords are the records of a sample delegated run: the agent reads a file it
// was allowed to, is refused a command, and answers; the answer is released.
func delegatedRecords() []Record {
	answer := "src/a.go reads its config once; the test command was not run."
	return []Record{
		Started{Agent: "coder", File: "agents/coder.symbi", SourceSHA256: sum("source"), DeclarationSHA256: sum("decl"),
			Mode: "delegated", Surface: "mcp-server", Caller: "stdio", ServerVersion: "test", DeadlineMS: 600000,
			InlinePolicies: []string{}, InlinePoliciesSHA256: sum(""), PolicyMode: "cedar", PolicyDigest: sum("policies"),
			PromptSHA256: sum("Review src/a.go"), PromptBytes: 15, InstructionsSHA256: sum(""), Prompt: "Review src/a.go"},
		SessionStarted{Executor: "fake", Command: []string{"/usr/local/bin/fake-acp-agent"}, Workspace: "/work/ws",
			ProtocolVersion: 1, AgentName: "fake-acp-agent", AgentVersion: "1.0.0", SessionID: "s-1", Mode: "default",
			PromptSHA256: sum("prompt"), PromptBytes: 6},
		AgentThought{TextSHA256: sum("Reading the file."), Bytes: 17, Chunks: 3, Text: "Reading the file."},
		ToolCall{ToolCallID: "call-1", Kind: "read", Title: "Read src/a.go", Status: "pending", Paths: []string{"src/a.go"}, RawInputSHA256: sum("{}"), RawInputBytes: 2},
		PermissionDecided{RequestID: "fs-1", ToolCallID: "call-1", Kind: "read", Title: "fs/read_text_file src/a.go", Paths: []string{"src/a.go"},
			Decision: "allow", PolicyIDs: []string{"tools-read-search"}},
		FSRead{RequestID: "fs-1", Path: "src/a.go", Bytes: 120, SHA256: sum("package a")},
		ToolCallUpdate{ToolCallID: "call-1", Status: "completed", RawOutputSHA256: sum("package a"), RawOutputBytes: 120, Excerpt: "package a"},
		PermissionDecided{RequestID: "perm-1", ToolCallID: "call-2", Kind: "execute", Title: "go test ./...", Paths: []string{"."},
			Decision: "deny", PolicyIDs: []string{"tools-no-execute"}, OptionID: "reject-once"},
		Plan{Entries: []PlanEntry{{Content: "Read the file", Priority: "high", Status: "completed"}, {Content: "Answer", Priority: "high", Status: "in_progress"}}},
		AgentMessage{TextSHA256: sum(answer), Bytes: int64(len(answer)), Chunks: 7, Text: answer},
		SessionFinished{Outcome: "completed", StopReason: "end_turn", TextSHA256: sum(answer), TextBytes: int64(len(answer)), Text: answer},
		PolicyEvaluated{Action: "respond", Decision: "allow", PolicyIDs: []string{"respond"}, TextSHA256: sum(answer), TextBytes: int64(len(answer))},
		Terminated{Reason: "completed", Released: true, DurationMS: 4200},
	}
}

// gatedRecords is a run whose answer a @gate("human") forbid held, approved by another
// caller, then released.
func gatedRecords() []Record {
	r := run{agent: "greeter", prompt: "Write to ACME about the outage.", text: "Dear ACME, the outage is over.", allow: false}
	recs := r.records()
	pe := recs[3].(PolicyEvaluated)
	pe.PolicyIDs, pe.Gate = []string{"customer-names"}, "customer-names"
	return []Record{recs[0], recs[1], recs[2], pe,
		ApprovalRequested{Gate: "customer-names", TextSHA256: pe.TextSHA256, TextBytes: pe.TextBytes, TimeoutMS: 86400000},
		ApprovalDecided{Decision: "approve", Approver: "bob", ApproverAuth: "token", Reason: "checked: no customer data", Via: "approve_run"},
		Terminated{Reason: "completed", Released: true, DurationMS: 42},
	}
}

// runChild runs this test binary as the child mode of TestMain on the project dir and
// decodes the JSON it prints into res.
func runChild(t *testing.T, mode, dir string, res any) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "JOURNAL_TEST_CHILD="+mode, "JOURNAL_TEST_DIR="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	if err := json.Unmarshal(out, res); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
}

// childStore opens (creating) the store of the project dir in a child process.
func childStore(dir string) (*Store, error) {
	root, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	return OpenStore(root, StoreOptions{Create: true})
}

// limitFileSize sets RLIMIT_FSIZE to n bytes with SIGXFSZ ignored, so that a write past it
// fails with EFBIG instead of killing the process.
func limitFileSize(n uint64) error {
	_, err := proctest.LimitFileSize(n)
	return err
}
