package runs_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"symbi/internal/errcode"
	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/policy"
	"symbi/internal/runs"
)

// ---- fixture ----------------------------------------------------------------------------

// testProject is a project directory with its governed store and ledger, as a server
// leaves them.
type testProject struct {
	dir   string
	root  *os.File
	store *journal.Store
	pub   ed25519.PublicKey
	lw    *ledger.Writer
}

// newTestProject makes a project with a fresh key (seed nil) or the given 32-byte seed.
func newTestProject(t testing.TB, seed []byte) *testProject {
	t.Helper()
	dir := t.TempDir()
	if seed != nil {
		gov := filepath.Join(dir, ".symbiont", "governed")
		if err := os.MkdirAll(gov, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(gov, journal.KeyFileName), seed, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	store, err := journal.OpenStore(root, journal.StoreOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	lw, err := ledger.Open(root, store.SigningKey())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lw.Close() })
	return &testProject{dir: dir, root: root, store: store, pub: store.PublicKey(), lw: lw}
}

// open opens a read-only Manager of the project that records resolutions in its ledger.
func (p *testProject) open(t testing.TB) *runs.Manager {
	t.Helper()
	m, err := runs.Open(runs.Config{Root: p.root, Ledger: p.lw})
	if err != nil {
		t.Fatalf("runs.Open: %v", err)
	}
	return m
}

func (p *testProject) ledgerPath() string { return filepath.Join(p.dir, ".symbiont", ledger.FileName) }

func (p *testProject) journalPath(agent, runID string) string {
	return filepath.Join(p.store.Dir(), journal.FileName(policy.AgentID(agent), runID))
}

func newRunID(t testing.TB) string {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return id.String()
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// The terminated records' error texts, by reason.
var errText = map[string]string{
	runs.StatusPolicyDenied:    "the response was denied by policy forbid-secrets",
	runs.StatusInferenceFailed: "the provider answered HTTP 500",
	runs.StatusCancelled:       "the run was cancelled by cancel_run",
	runs.StatusTimeout:         "the deadline of 120000 ms passed",
	runs.StatusAuditFailed:     "the project ledger could not record the run",
}

// records returns the records of a run of agent that ends with reason ("" for a run
// without its terminated record). text is the response text; retain journals it in
// clear (otherwise only its digest).
func records(agent, reason, text string, retain bool) []journal.Record {
	started := journal.Started{Agent: agent, File: "agents/" + agent + ".symbi", SourceSHA256: sum("source"),
		DeclarationSHA256: sum("decl"), Mode: "text_response", Surface: "mcp-server", Caller: "stdio",
		ServerVersion: "test", MaxOutputTokens: 4096, DeadlineMS: 120000, Provider: "openai", Model: "m",
		PolicyMode: "default", PromptSHA256: sum("hello"), PromptBytes: 5, InstructionsSHA256: sum(""), Prompt: "hello"}
	requested := journal.InferenceRequested{CallID: "call-1", RequestSHA256: sum("req"), RequestBytes: 3, MaxTokens: 4096, DeadlineMS: 120000}
	finished := func(outcome string) journal.InferenceFinished {
		f := journal.InferenceFinished{CallID: "call-1", Outcome: outcome, TextSHA256: sum(text), TextBytes: int64(len(text))}
		if outcome == "completed" {
			f.HTTPStatus, f.FinishReason = 200, "stop"
			if retain {
				f.Text = text
			}
		} else {
			f.Error = outcome
		}
		return f
	}
	evaluated := func(decision string) journal.PolicyEvaluated {
		return journal.PolicyEvaluated{Action: "respond", Decision: decision, PolicyIDs: []string{"p0"}, TextSHA256: sum(text), TextBytes: int64(len(text))}
	}
	end := journal.Terminated{Reason: reason, DurationMS: 42, Error: errText[reason]}
	switch reason {
	case "":
		return []journal.Record{started, requested}
	case runs.StatusCompleted:
		end.Released = true
		return []journal.Record{started, requested, finished("completed"), evaluated("allow"), end}
	case runs.StatusPolicyDenied:
		return []journal.Record{started, requested, finished("completed"), evaluated("deny"), end}
	case runs.StatusInferenceFailed:
		return []journal.Record{started, requested, finished("error"), end}
	case runs.StatusTimeout:
		return []journal.Record{started, requested, finished("timeout"), end}
	default: // cancelled, audit_failed
		return []journal.Record{started, requested, end}
	}
}

// journalRun writes recs as the journal of runID of agent and returns its writer, synced;
// closed unless keepOpen (then closed when the test ends).
func (p *testProject) journalRun(t testing.TB, agent, runID string, recs []journal.Record, keepOpen bool) *journal.Writer {
	t.Helper()
	w, err := p.store.Create(policy.AgentID(agent), runID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if keepOpen {
		t.Cleanup(func() { w.Close() })
	} else if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w
}

// recordRun appends the run ledger entry of the journal of runID as it is on disk.
func (p *testProject) recordRun(t testing.TB, agent, runID, reason string) {
	t.Helper()
	ls := completeLines(readFile(t, p.journalPath(agent, runID)))
	head, prevHead := journal.ZeroHash, journal.ZeroHash
	if n := len(ls); n > 0 {
		head = hashLine(ls[n-1])
		if n > 1 {
			prevHead = hashLine(ls[n-2])
		}
	}
	if _, err := p.lw.Append(ledger.Run{RunID: runID, AgentID: policy.AgentID(agent), Agent: agent,
		File: journal.FileName(policy.AgentID(agent), runID), Reason: reason, Released: reason == runs.StatusCompleted,
		Records: int64(len(ls)), Head: head, PrevHead: prevHead, Caller: "stdio"}); err != nil {
		t.Fatal(err)
	}
}

// run journals and records a whole run of agent ending with reason, as a server does,
// and returns its id.
func (p *testProject) run(t testing.TB, agent, reason string) string {
	t.Helper()
	id := newRunID(t)
	p.runWithID(t, agent, id, reason)
	return id
}

func (p *testProject) runWithID(t testing.TB, agent, id, reason string) {
	t.Helper()
	p.journalRun(t, agent, id, records(agent, reason, "the answer", true), false)
	p.recordRun(t, agent, id, reason)
}

func (p *testProject) resolve(t testing.TB, runID, value, note string) {
	t.Helper()
	if _, err := p.lw.Append(ledger.Resolution{RunID: runID, Resolution: value, Note: note, Caller: "tester"}); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// completeLines splits data into its complete lines, each with its "\n"; a final
// fragment is left out.
func completeLines(data []byte) [][]byte {
	var out [][]byte
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return out
		}
		out = append(out, data[:i+1])
		data = data[i+1:]
	}
}

func hashLine(l []byte) string {
	h := sha256.Sum256(l)
	return hex.EncodeToString(h[:])
}

func flipByte(l []byte, i int) []byte {
	out := bytes.Clone(l)
	out[i] ^= 0x01
	return out
}

// checkChain checks that lines[0..k] are the journal of runID as the format requires of
// a line served as an event: each signature verifies with pub over the exact payload,
// seq is the line's index, run_id is runID and prev is the hash of the line before.
func checkChain(lines [][]byte, k int, runID string, pub ed25519.PublicKey) error {
	for j := 0; j <= k; j++ {
		if err := checkLink(lines, j, runID, pub); err != nil {
			return err
		}
	}
	return nil
}

// checkLink checks line j of a journal as checkChain does, given the line before it.
func checkLink(lines [][]byte, j int, runID string, pub ed25519.PublicKey) error {
	if j >= len(lines) {
		return fmt.Errorf("line %d: there is no such complete line", j+1)
	}
	prev := journal.ZeroHash
	if j > 0 {
		prev = hashLine(lines[j-1])
	}
	var msg []byte
	p, err := journal.Open(lines[j], pub, journal.SignatureContext, &msg)
	if err != nil {
		return fmt.Errorf("line %d: %v", j+1, err)
	}
	var f struct {
		Seq   int64  `json:"seq"`
		RunID string `json:"run_id"`
		Prev  string `json:"prev"`
	}
	if err := json.Unmarshal(p, &f); err != nil {
		return fmt.Errorf("line %d: %v", j+1, err)
	}
	if f.Seq != int64(j) || f.RunID != runID || f.Prev != prev {
		return fmt.Errorf("line %d: seq %d run_id %q prev %s; want seq %d run_id %q prev %s", j+1, f.Seq, f.RunID, f.Prev, j, runID, prev)
	}
	return nil
}

// checkEvents checks that each event is the exact line at its seq of the journal lines
// and verifies, chained from the journal's first line.
// servedAs reports whether ev serves line: the exact line, or, withheld (a record with
// the run's output in clear, before its release), the line's hash.
func servedAs(ev runs.Event, line []byte) bool {
	if ev.Withheld != "" {
		sum := sha256.Sum256(line)
		return ev.Line == "" && ev.LineSHA256 == hex.EncodeToString(sum[:])
	}
	return ev.Line+"\n" == string(line)
}

func checkEvents(t testing.TB, evs []runs.Event, lines [][]byte, runID string, pub ed25519.PublicKey) {
	t.Helper()
	for _, ev := range evs {
		if ev.Seq < 0 || ev.Seq >= int64(len(lines)) || !servedAs(ev, lines[ev.Seq]) {
			t.Fatalf("event seq %d is not the journal's line %d: %q", ev.Seq, ev.Seq+1, ev.Line)
		}
		if err := checkChain(lines, int(ev.Seq), runID, pub); err != nil {
			t.Fatalf("event seq %d was served, but the journal does not verify up to it: %v", ev.Seq, err)
		}
	}
}

// wantCode fails unless err carries code and its message holds every one of subs.
func wantCode(t testing.TB, err error, code errcode.Code, subs ...string) {
	t.Helper()
	if got := errcode.Of(err); got != code {
		t.Fatalf("error %v (code %q), want code %q", err, got, code)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not say %q", err, s)
		}
	}
}

func events(t testing.TB, m *runs.Manager, id string, after int64, limit int) (*runs.Events, error) {
	t.Helper()
	return m.Events(context.Background(), id, after, limit, 0)
}

// ---- run id arguments ---------------------------------------------------------------------

// TestRunIDArgument: an argument that is not a run id is refused before anything is
// looked up, and a well-formed unknown one is run_not_found, by every call taking one.
func TestRunIDArgument(t *testing.T) {
	p := newTestProject(t, nil)
	p.run(t, "alpha", runs.StatusCompleted)
	m := p.open(t)
	calls := []struct {
		name string
		call func(id string) error
	}{
		{"Status", func(id string) error { _, err := m.Status(id); return err }},
		{"Events", func(id string) error { _, err := events(t, m, id, 0, 0); return err }},
		{"Cancel", func(id string) error { _, _, err := m.Cancel(context.Background(), id); return err }},
		{"Resolve", func(id string) error {
			_, err := m.Resolve(id, "accepted", "", runs.Caller{ID: "tester", Auth: "stdio"})
			return err
		}},
	}
	tests := []struct {
		name string
		id   string
		code errcode.Code
	}{
		{"path traversal", "../x", errcode.InvalidRequest},
		{"empty", "", errcode.InvalidRequest},
		{"200 bytes", strings.Repeat("a", 200), errcode.InvalidRequest},
		{"1 MiB", strings.Repeat("a", 1<<20), errcode.InvalidRequest},
		{"129 bytes", strings.Repeat("a", runs.MaxRunIDBytes+1), errcode.InvalidRequest},
		{"unicode", "ünïcødé-run", errcode.InvalidRequest},
		{"dot", "a.b", errcode.InvalidRequest},
		{"slash", "a/b", errcode.InvalidRequest},
		{"glob", "*", errcode.InvalidRequest},
		{"NUL", "a\x00b", errcode.InvalidRequest},
		{"unknown uuid", newRunID(t), errcode.RunNotFound},
		{"unknown 128 bytes", strings.Repeat("b", runs.MaxRunIDBytes), errcode.RunNotFound},
	}
	for _, tt := range tests {
		for _, c := range calls {
			t.Run(tt.name+"/"+c.name, func(t *testing.T) {
				err := c.call(tt.id)
				wantCode(t, err, tt.code)
				if got := errors.Is(err, runs.ErrNotFound); got != (tt.code == errcode.RunNotFound) {
					t.Fatalf("errors.Is(%v, ErrNotFound) = %v", err, got)
				}
				// The message quotes at most errcode.MaxQuoted bytes of the argument.
				if len(tt.id) > errcode.MaxQuoted && (len(err.Error()) > 2*errcode.MaxQuoted || !strings.Contains(err.Error(), fmt.Sprintf("(%d bytes in all)", len(tt.id)))) {
					t.Fatalf("a %d-byte id is not clipped: %d-byte message %.300q", len(tt.id), len(err.Error()), err)
				}
			})
		}
	}
}

// ---- status of finished runs --------------------------------------------------------------

// TestStatusEnded: a run recorded in the ledger is told as its entry and its verified
// journal say.
func TestStatusEnded(t *testing.T) {
	tests := []struct {
		reason   string
		retain   bool
		text     *string
		retained *bool
	}{
		{runs.StatusCompleted, true, ptr("the answer"), ptr(true)},
		{runs.StatusCompleted, false, nil, ptr(false)}, // hashes-only journal
		{runs.StatusPolicyDenied, true, nil, nil},
		{runs.StatusInferenceFailed, true, nil, nil},
		{runs.StatusCancelled, true, nil, nil},
		{runs.StatusTimeout, true, nil, nil},
		{runs.StatusAuditFailed, true, nil, nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/retain=%v", tt.reason, tt.retain), func(t *testing.T) {
			p := newTestProject(t, nil)
			id := newRunID(t)
			p.journalRun(t, "alpha", id, records("alpha", tt.reason, "the answer", tt.retain), false)
			p.recordRun(t, "alpha", id, tt.reason)
			st, err := p.open(t).Status(id)
			if err != nil {
				t.Fatal(err)
			}
			ls := completeLines(readFile(t, p.journalPath("alpha", id)))
			want := runs.Status{RunID: id, Agent: "alpha", AgentID: policy.AgentID("alpha"), Status: tt.reason,
				Reason: errText[tt.reason], Released: tt.reason == runs.StatusCompleted, Records: int64(len(ls)),
				Head: hashLine(ls[len(ls)-1]), Caller: "stdio", Journal: p.journalPath("alpha", id)}
			if st.StartedAt == "" || st.EndedAt == "" {
				t.Fatalf("started_at %q, ended_at %q: want both", st.StartedAt, st.EndedAt)
			}
			if !eqPtr(st.Text, tt.text) || !eqPtr(st.TextRetained, tt.retained) {
				t.Fatalf("text %v retained %v, want %v %v", deref(st.Text), deref(st.TextRetained), deref(tt.text), deref(tt.retained))
			}
			got := *st
			got.StartedAt, got.EndedAt, got.Text, got.TextRetained = "", "", nil, nil
			if got != want {
				t.Fatalf("status\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

func ptr[T any](v T) *T { return &v }

func eqPtr[T comparable](a, b *T) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// ---- attacks on a journal -----------------------------------------------------------------

// TestJournalAltered: a journal changed after the fact is never served beyond the first
// line that does not verify, at any cursor and page size: the lines before it are served
// as they were signed, a page that would reach it is an audit_unavailable error naming it,
// and the run's status names the problem. A torn final line is not served and is no error.
func TestJournalAltered(t *testing.T) {
	tests := []struct {
		name string
		// alter changes the lines of the run's journal; other is another run's journal.
		alter func(lines, other [][]byte) []byte
		bad   int    // the 0-based index of the first line that must not verify; -1: none
		why   string // what the problem says of that line
	}{
		{"byte flipped in the payload of line 3", func(ls, _ [][]byte) []byte {
			ls[2] = flipByte(ls[2], 30)
			return bytes.Join(ls, nil)
		}, 2, "signature does not verify"},
		{"byte flipped in the signature of line 5", func(ls, _ [][]byte) []byte {
			ls[4] = flipByte(ls[4], len(ls[4])-10)
			return bytes.Join(ls, nil)
		}, 4, "signature"},
		{"byte flipped in the first line", func(ls, _ [][]byte) []byte {
			ls[0] = flipByte(ls[0], 40)
			return bytes.Join(ls, nil)
		}, 0, "signature does not verify"},
		{"newline removed after line 2", func(ls, _ [][]byte) []byte {
			ls[1] = ls[1][:len(ls[1])-1]
			return bytes.Join(ls, nil)
		}, 1, "signature does not verify"},
		{"line 2 replaced by the signed line 2 of another run", func(ls, other [][]byte) []byte {
			ls[1] = other[1]
			return bytes.Join(ls, nil)
		}, 1, "prev is not the hash"},
		{"line 1 replaced by the signed line 1 of another run", func(ls, other [][]byte) []byte {
			ls[0] = other[0]
			return bytes.Join(ls, nil)
		}, 0, "run_id is"},
		{"whole journal replaced by another run's", func(_, other [][]byte) []byte {
			return bytes.Join(other, nil)
		}, 0, "run_id is"},
		{"lines 2 and 3 swapped", func(ls, _ [][]byte) []byte {
			ls[1], ls[2] = ls[2], ls[1]
			return bytes.Join(ls, nil)
		}, 1, "seq is 2, want 1"},
		{"line 3 deleted", func(ls, _ [][]byte) []byte {
			return bytes.Join(slices.Delete(ls, 2, 3), nil)
		}, 2, "seq is 3, want 2"},
		{"line 2 duplicated", func(ls, _ [][]byte) []byte {
			return bytes.Join(slices.Insert(ls, 1, ls[1]), nil)
		}, 2, "seq is 1, want 2"},
		{"garbage line inserted after line 4", func(ls, _ [][]byte) []byte {
			return bytes.Join(slices.Insert(ls, 4, []byte("{}\n")), nil)
		}, 4, "line is not"},
		{"torn final line (no newline)", func(ls, _ [][]byte) []byte {
			ls[4] = ls[4][:len(ls[4])-7]
			return bytes.Join(ls, nil)
		}, -1, ""},
		{"final newline only removed", func(ls, _ [][]byte) []byte {
			ls[4] = ls[4][:len(ls[4])-1]
			return bytes.Join(ls, nil)
		}, -1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestProject(t, nil)
			id := p.run(t, "alpha", runs.StatusCompleted)
			other := p.run(t, "alpha", runs.StatusCompleted)
			path := p.journalPath("alpha", id)
			orig := completeLines(readFile(t, path))
			writeFile(t, path, tt.alter(completeLines(readFile(t, path)), completeLines(readFile(t, p.journalPath("alpha", other)))))
			all := int64(len(completeLines(readFile(t, path))))

			m := p.open(t)
			st, err := m.Status(id)
			if err != nil {
				t.Fatal(err)
			}
			if tt.bad < 0 {
				// Every whole line verifies, but the terminated record is gone: the end was
				// never (durably) written, so nothing was released, whatever the ledger says.
				if st.Status != runs.StatusAuditFailed || st.Released || st.Text != nil || !strings.Contains(st.JournalProblem, "no terminated record") {
					t.Fatalf("status %s released %v journal_problem %q; want audit_failed, not released, no terminated record", st.Status, st.Released, st.JournalProblem)
				}
				return
			} else if lineN := fmt.Sprintf("journal line %d: ", tt.bad+1); !strings.Contains(st.JournalProblem, lineN) || !strings.Contains(st.JournalProblem, tt.why) {
				t.Fatalf("journal_problem %q, want %q ... %q", st.JournalProblem, lineN, tt.why)
			}
			if st.Status != runs.StatusCompleted { // the ledger's word, whatever the journal says
				t.Fatalf("status %s, want completed (from the ledger)", st.Status)
			}
			if tt.bad >= 0 && tt.bad <= 2 && st.Text != nil {
				t.Fatalf("the released text %q was served from a journal that does not verify up to it", *st.Text)
			}

			for after := int64(0); after <= all; after++ {
				for limit := 1; limit <= 7; limit++ {
					evs, err := events(t, m, id, after, limit)
					if tt.bad >= 0 && after >= int64(tt.bad) {
						if evs != nil || err == nil {
							t.Fatalf("after %d limit %d: served %+v, want an error: line %d does not verify", after, limit, evs, tt.bad+1)
						}
						wantCode(t, err, errcode.AuditUnavailable, fmt.Sprintf("journal line %d: ", tt.bad+1), tt.why, id)
						continue
					}
					if err != nil {
						t.Fatalf("after %d limit %d: %v", after, limit, err)
					}
					end := min(after+int64(limit), all)
					if tt.bad >= 0 {
						end = min(end, int64(tt.bad))
					}
					if int64(len(evs.Events)) != end-after || evs.NextCursor != end {
						t.Fatalf("after %d limit %d: %d events, next %d; want %d, next %d", after, limit, len(evs.Events), evs.NextCursor, end-after, end)
					}
					for k, ev := range evs.Events {
						if ev.Seq != after+int64(k) || !servedAs(ev, orig[ev.Seq]) {
							t.Fatalf("after %d limit %d: event %d is seq %d %q; want the signed line %d", after, limit, k, ev.Seq, ev.Line, after+int64(k)+1)
						}
					}
					checkEvents(t, evs.Events, orig, id, p.pub)
					if want := tt.bad < 0 && end == all; evs.Done != want {
						t.Fatalf("after %d limit %d: done %v, want %v", after, limit, evs.Done, want)
					}
				}
			}
		})
	}
}

// TestJournalTruncated: a journal cut short at a line boundary is checked against the
// receipt its ledger entry recorded. Only its last line missing, with the rest ending at
// the entry's prev_head, is the server stopping between the ledger entry and that line
// (the ledger holds the outcome); any other shortening is reported, and the events end
// with an error rather than "done". list_runs' status filter finds each run under the
// status run_status gives it (audit_failed for an end never written), and only there.
func TestJournalTruncated(t *testing.T) {
	tests := []struct {
		name    string
		keep    int
		problem bool
		unended bool // the end the ledger recorded was never written: audit_failed, done
	}{
		{"whole", 5, false, false},
		{"last line missing (stopped before it)", 4, false, true},
		{"last two lines deleted", 3, true, false},
		{"only the started line left", 1, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestProject(t, nil)
			id := p.run(t, "alpha", runs.StatusCompleted)
			path := p.journalPath("alpha", id)
			ls := completeLines(readFile(t, path))
			writeFile(t, path, bytes.Join(ls[:tt.keep], nil))
			m := p.open(t)
			st, err := m.Status(id)
			if err != nil {
				t.Fatal(err)
			}
			if tt.unended {
				if st.Status != runs.StatusAuditFailed || st.Released || st.Text != nil || !strings.Contains(st.JournalProblem, "no terminated record") {
					t.Fatalf("status %s released %v text %v journal_problem %q; want audit_failed, nothing released", st.Status, st.Released, st.Text, st.JournalProblem)
				}
			} else if got := st.JournalProblem != ""; got != tt.problem {
				t.Fatalf("journal_problem %q; want a problem: %v", st.JournalProblem, tt.problem)
			}
			if tt.problem && !strings.Contains(st.JournalProblem, fmt.Sprintf("the journal has %d records", tt.keep)) {
				t.Fatalf("journal_problem %q does not say how many records the journal has", st.JournalProblem)
			}
			// list_runs' status filter agrees with run_status: the run is listed under its
			// status (audit_failed when unended, not the ledger's completed) and no other.
			for _, s := range runs.Statuses {
				page, err := m.List(runs.Filter{Status: s})
				if err != nil {
					t.Fatal(err)
				}
				if listed := len(page.Runs) == 1 && page.Runs[0].RunID == id; listed != (s == st.Status) || len(page.Runs) > 1 {
					t.Fatalf("list_runs {status: %s} lists %d runs; run_status says %s", s, len(page.Runs), st.Status)
				}
			}
			evs, err := events(t, m, id, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			checkEvents(t, evs.Events, ls, id, p.pub)
			if len(evs.Events) != tt.keep || evs.Done == tt.problem {
				t.Fatalf("%d events, done %v; want %d, done %v", len(evs.Events), evs.Done, tt.keep, !tt.problem)
			}
			evs, err = events(t, m, id, int64(tt.keep), 100)
			if tt.problem {
				wantCode(t, err, errcode.AuditUnavailable, "ledger recorded 5")
			} else if err != nil || len(evs.Events) != 0 || !evs.Done {
				t.Fatalf("at the end: %+v, %v; want no event, done", evs, err)
			}
		})
	}
}

// TestWrongKey: no journal or ledger line verifies with another key.
func TestWrongKey(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	p.journalRun(t, "alpha", id, records("alpha", runs.StatusCompleted, "x", true), false)
	other := newTestProject(t, nil)
	var msg []byte
	for i, l := range completeLines(readFile(t, p.journalPath("alpha", id))) {
		if _, err := journal.Open(l, other.pub, journal.SignatureContext, &msg); err == nil {
			t.Fatalf("line %d verified with another project's key", i+1)
		}
		if _, err := journal.Open(l, p.pub, journal.SignatureContext, &msg); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if _, err := journal.Open(l, p.pub, ledger.Context, &msg); err == nil {
			t.Fatalf("journal line %d verified as a ledger line", i+1)
		}
	}

	keyFile := filepath.Join(t.TempDir(), "other.key")
	writeFile(t, keyFile, bytes.Repeat([]byte{7}, ed25519.SeedSize))
	// The journal is unknown to the (empty) ledger: its lines are read with the other key.
	m, err := runs.Open(runs.Config{Root: p.root, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.Status(id)
	if err != nil || !strings.Contains(st.JournalProblem, "journal line 1: signature does not verify") {
		t.Fatalf("status %+v, %v; want a journal_problem at line 1", st, err)
	}
	_, err = events(t, m, id, 0, 10)
	wantCode(t, err, errcode.AuditUnavailable, "journal line 1: signature does not verify")

	// Once the ledger has an entry, the other key cannot even read the ledger.
	p.recordRun(t, "alpha", id, runs.StatusCompleted)
	_, err = runs.Open(runs.Config{Root: p.root, KeyFile: keyFile})
	wantCode(t, err, errcode.AuditUnavailable, "the project ledger does not verify", "line 1")
}

// TestJournalRenamed: a journal the ledger does not know, renamed to another agent's
// name, is not taken as that agent's run: its lines carry their own agent_id.
func TestJournalRenamed(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	p.journalRun(t, "alpha", id, records("alpha", runs.StatusCancelled, "x", true), false)
	if err := os.Rename(p.journalPath("alpha", id), p.journalPath("beta", id)); err != nil {
		t.Fatal(err)
	}
	m := p.open(t)
	st, err := m.Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.JournalProblem, "journal line 1: agent_id is") {
		t.Fatalf("status %+v: want a journal_problem naming the agent_id of line 1", st)
	}
	_, err = events(t, m, id, 0, 10)
	wantCode(t, err, errcode.AuditUnavailable, "journal line 1: agent_id is")
}

// ---- attacks on the ledger ---------------------------------------------------------------

func editLines(t testing.TB, path string, f func([][]byte) [][]byte) {
	t.Helper()
	writeFile(t, path, bytes.Join(f(completeLines(readFile(t, path))), nil))
}

// TestLedgerAltered: a ledger that does not verify fails every answer about runs closed,
// naming the ledger's problem — whether it was altered before a Manager opened or while
// one was reading it.
func TestLedgerAltered(t *testing.T) {
	tests := []struct {
		name   string
		before func(t *testing.T, p *testProject, ids []string) // before the Manager opens
		after  func(t *testing.T, p *testProject, ids []string) // once it has read the ledger
		want   []string
	}{
		{name: "byte flipped in entry 3", before: func(t *testing.T, p *testProject, ids []string) {
			editLines(t, p.ledgerPath(), func(ls [][]byte) [][]byte { ls[2] = flipByte(ls[2], 30); return ls })
		}, want: []string{"line 3", "signature does not verify"}},
		{name: "entry 2 deleted", before: func(t *testing.T, p *testProject, ids []string) {
			editLines(t, p.ledgerPath(), func(ls [][]byte) [][]byte { return slices.Delete(ls, 1, 2) })
		}, want: []string{"line 2", "seq is 2, want 1"}},
		{name: "entries 1 and 2 swapped", before: func(t *testing.T, p *testProject, ids []string) {
			editLines(t, p.ledgerPath(), func(ls [][]byte) [][]byte { ls[0], ls[1] = ls[1], ls[0]; return ls })
		}, want: []string{"line 1", "seq is 1, want 0"}},
		{name: "a journal line in the ledger", before: func(t *testing.T, p *testProject, ids []string) {
			j := completeLines(readFile(t, p.journalPath("alpha", ids[0])))
			editLines(t, p.ledgerPath(), func(ls [][]byte) [][]byte { return append(ls, j[0]) })
		}, want: []string{"line 4", "signature does not verify"}},
		{name: "last entry deleted while open", after: func(t *testing.T, p *testProject, ids []string) {
			editLines(t, p.ledgerPath(), func(ls [][]byte) [][]byte { return ls[:len(ls)-1] })
		}, want: []string{"the file shrank"}},
		{name: "entry appended, then a byte flipped in it, while open", after: func(t *testing.T, p *testProject, ids []string) {
			p.resolve(t, ids[0], "accepted", "")
			editLines(t, p.ledgerPath(), func(ls [][]byte) [][]byte { ls[3] = flipByte(ls[3], 30); return ls })
		}, want: []string{"line 4", "signature does not verify"}},
		{name: "ledger replaced by a symlink while open", after: func(t *testing.T, p *testProject, ids []string) {
			b := readFile(t, p.ledgerPath())
			moved := filepath.Join(t.TempDir(), "ledger.jsonl")
			writeFile(t, moved, append(b, b...))
			os.Remove(p.ledgerPath())
			if err := os.Symlink(moved, p.ledgerPath()); err != nil {
				t.Fatal(err)
			}
		}, want: []string{"the project ledger"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestProject(t, nil)
			ids := []string{p.run(t, "alpha", runs.StatusCompleted), p.run(t, "alpha", runs.StatusCancelled), p.run(t, "beta", runs.StatusTimeout)}
			var m *runs.Manager
			if tt.before != nil {
				tt.before(t, p, ids)
				_, err := runs.Open(runs.Config{Root: p.root, Ledger: p.lw})
				wantCode(t, err, errcode.AuditUnavailable, tt.want...)
				m = runs.New(runs.Config{Root: p.root, Ledger: p.lw}) // a server's Manager
			} else {
				m = p.open(t)
				if _, err := m.List(runs.Filter{}); err != nil {
					t.Fatal(err)
				}
				for _, id := range ids {
					if _, err := m.Status(id); err != nil {
						t.Fatal(err)
					}
				}
				tt.after(t, p, ids)
			}
			_, err := m.List(runs.Filter{})
			wantCode(t, err, errcode.AuditUnavailable, tt.want...)
			// Every answer fails closed, for runs read before the problem too.
			for _, id := range ids {
				_, err = m.Status(id)
				wantCode(t, err, errcode.AuditUnavailable, tt.want...)
				_, err = events(t, m, id, 0, 10)
				wantCode(t, err, errcode.AuditUnavailable, tt.want...)
				_, err = m.Resolve(id, "accepted", "", runs.Caller{ID: "tester", Auth: "stdio"})
				wantCode(t, err, errcode.AuditUnavailable, tt.want...)
				_, _, err = m.Cancel(context.Background(), id)
				wantCode(t, err, errcode.AuditUnavailable, tt.want...)
			}
		})
	}
}

// TestLedgerTornLine: a ledger line still being written (no "\n" yet) is not taken until
// it is whole, and is no error.
func TestLedgerTornLine(t *testing.T) {
	p := newTestProject(t, nil)
	first := p.run(t, "alpha", runs.StatusCompleted)
	m := p.open(t)
	if page, err := m.List(runs.Filter{}); err != nil || len(page.Runs) != 1 {
		t.Fatalf("%+v, %v", page, err)
	}

	second := p.run(t, "alpha", runs.StatusCancelled)
	whole := readFile(t, p.ledgerPath())
	last := bytes.LastIndexByte(whole[:len(whole)-1], '\n') + 1
	for _, cut := range []int{last + 1, last + 40, len(whole) - 1} {
		writeFile(t, p.ledgerPath(), whole[:cut])
		page, err := m.List(runs.Filter{})
		if err != nil {
			t.Fatalf("torn at %d: %v", cut, err)
		}
		if len(page.Runs) != 1 || page.Runs[0].RunID != first {
			t.Fatalf("torn at %d: listed %+v; want only the first run", cut, page.Runs)
		}
	}
	// The torn entry's run is not in the ledger yet: its journal is found on disk.
	st, err := m.Status(second)
	if err != nil || st.Status != runs.StatusCancelled {
		t.Fatalf("torn: status %+v, %v", st, err)
	}
	writeFile(t, p.ledgerPath(), whole)
	page, err := m.List(runs.Filter{})
	if err != nil || len(page.Runs) != 2 || page.Runs[0].RunID != second || page.Runs[1].RunID != first {
		t.Fatalf("whole again: %+v, %v", page, err)
	}

	// A fresh Manager over a ledger ending in a torn line opens.
	writeFile(t, p.ledgerPath(), whole[:len(whole)-1])
	m2 := p.open(t)
	st, err = m2.Status(second)
	if err != nil || st.Status != runs.StatusCancelled || st.Caller != "stdio" {
		t.Fatalf("status %+v, %v", st, err)
	}
}

// ---- pruned, external and recovered runs -------------------------------------------------

// TestPruned: a run whose journal symbi audit prune removed keeps its ledger status; its
// events are gone.
func TestPruned(t *testing.T) {
	p := newTestProject(t, nil)
	id := p.run(t, "alpha", runs.StatusPolicyDenied)
	ls := completeLines(readFile(t, p.journalPath("alpha", id)))
	if _, err := p.lw.Append(ledger.Pruned{RunID: id, File: filepath.Base(p.journalPath("alpha", id)), Records: int64(len(ls)), Head: hashLine(ls[len(ls)-1])}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p.journalPath("alpha", id)); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*runs.Manager{p.open(t), runs.New(runs.Config{Root: p.root})} {
		st, err := m.Status(id)
		if err != nil {
			t.Fatal(err)
		}
		if !st.JournalPruned || st.Status != runs.StatusPolicyDenied || st.JournalProblem != "" || st.Records != int64(len(ls)) {
			t.Fatalf("status %+v; want policy_denied, journal_pruned, no problem", st)
		}
		_, err = events(t, m, id, 0, 10)
		wantCode(t, err, errcode.NotFound, "pruned")
	}
}

// TestPrunedRecoveredKeepsItsEnding: a journal the ledger recorded as found, complete (here
// ending policy_denied), keeps its status once pruned — the pruned entry records how it
// ended — and is not taken for abandoned, which is a journal with no terminated record.
func TestPrunedRecoveredKeepsItsEnding(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	p.journalRun(t, "alpha", id, records("alpha", runs.StatusPolicyDenied, "the answer", true), false)
	if rec, err := ledger.Reconcile(p.lw, p.store.Dir(), p.pub); err != nil || len(rec) != 1 || rec[0].State != "complete" {
		t.Fatalf("reconcile: %v %+v", err, rec)
	}
	if pruned, _, err := ledger.Prune(p.root, "", func(r string, _ time.Time) bool { return r == id }, false); err != nil || len(pruned) != 1 {
		t.Fatalf("prune: %v %+v", err, pruned)
	}
	st, err := p.open(t).Status(id)
	if err != nil || st.Status != runs.StatusPolicyDenied || st.Released || !st.JournalPruned {
		t.Fatalf("the pruned run recovered as complete: %+v, %v; want policy_denied, not released, pruned", st, err)
	}
}

// TestPrunedUnendedStaysAuditFailed: a run whose ledger entry says completed, released, but
// whose journal never got its terminated line released nothing (audit_failed); pruning
// that journal — recorded one line short, no ending — leaves it so.
func TestPrunedUnendedStaysAuditFailed(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	p.journalRun(t, "alpha", id, records("alpha", runs.StatusCompleted, "the answer", true), false)
	p.recordRun(t, "alpha", id, runs.StatusCompleted)
	path := p.journalPath("alpha", id)
	ls := completeLines(readFile(t, path))
	writeFile(t, path, bytes.Join(ls[:len(ls)-1], nil)) // the terminated line never became durable
	if st, err := p.open(t).Status(id); err != nil || st.Status != runs.StatusAuditFailed || st.Released {
		t.Fatalf("before the prune: %+v, %v; want audit_failed, not released", st, err)
	}
	if pruned, _, err := ledger.Prune(p.root, "", func(r string, _ time.Time) bool { return r == id }, false); err != nil || len(pruned) != 1 {
		t.Fatalf("prune: %v %+v", err, pruned)
	}
	st, err := p.open(t).Status(id)
	if err != nil || st.Status != runs.StatusAuditFailed || st.Released || !strings.Contains(st.JournalProblem, "had no terminated record") {
		t.Fatalf("after the prune: %+v, %v; want audit_failed, not released, saying why", st, err)
	}
}

// TestExternal: a journal the ledger does not know is another process's run while a
// writer holds it, and otherwise a crash: abandoned without a terminated record, as its
// terminated record says with one.
func TestExternal(t *testing.T) {
	p := newTestProject(t, nil)
	m := p.open(t)

	// Begun after the Manager opened: found on disk by its id.
	live := newRunID(t)
	w := p.journalRun(t, "alpha", live, records("alpha", "", "", true), true)
	st, err := m.Status(live)
	if err != nil || st.Status != runs.StatusRunning || st.Agent != "alpha" || st.AgentID != policy.AgentID("alpha") {
		t.Fatalf("in progress: %+v, %v", st, err)
	}
	evs, err := events(t, m, live, 0, 10)
	if err != nil || len(evs.Events) != 2 || evs.Done || evs.Status != runs.StatusRunning {
		t.Fatalf("in progress: events %+v, %v; want 2, not done", evs, err)
	}
	evs, err = events(t, m, live, 2, 10)
	if err != nil || len(evs.Events) != 0 || evs.Done {
		t.Fatalf("in progress, at the end: %+v, %v; want none, not done", evs, err)
	}
	_, err = m.Resolve(live, "accepted", "", runs.Caller{ID: "tester", Auth: "stdio"})
	wantCode(t, err, errcode.InvalidTransition, "running")
	if !errors.Is(err, runs.ErrTransition) {
		t.Fatalf("%v is not ErrTransition", err)
	}
	_, _, err = m.Cancel(context.Background(), live)
	wantCode(t, err, errcode.InvalidTransition, "another server process")
	if !errors.Is(err, runs.ErrTransition) {
		t.Fatalf("%v is not ErrTransition", err)
	}
	if page, err := m.List(runs.Filter{Status: runs.StatusRunning}); err != nil || len(page.Runs) != 1 || page.Runs[0].RunID != live {
		t.Fatalf("list running: %+v, %v", page, err)
	}

	// The writer closes without a terminated record: the process stopped.
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = m.Status(live)
	if err != nil || st.Status != runs.StatusAbandoned || st.Reason == "" || st.Records != 2 || st.Head != w.Receipt().Head {
		t.Fatalf("writer closed: %+v, %v; want abandoned, 2 records", st, err)
	}
	evs, err = events(t, m, live, 2, 10)
	if err != nil || len(evs.Events) != 0 || !evs.Done || evs.Status != runs.StatusAbandoned {
		t.Fatalf("abandoned, at the end: %+v, %v; want done", evs, err)
	}
	if _, err := m.Resolve(live, "rejected", "", runs.Caller{ID: "tester", Auth: "stdio"}); err != nil {
		t.Fatalf("resolve an abandoned run: %v", err)
	}

	// A whole journal whose ledger entry was never written: a run's entry is durable before
	// its terminated record, so the journal was placed here or its entry lost. Its end is
	// reported, with the problem, and its text is not served.
	for _, reason := range []string{runs.StatusCompleted, runs.StatusTimeout} {
		id := newRunID(t)
		p.journalRun(t, "beta", id, records("beta", reason, "text", true), false)
		for _, m := range []*runs.Manager{m, p.open(t)} {
			st, err := m.Status(id)
			if err != nil || st.Status != reason || st.Reason != errText[reason] || st.Records != 5-boolInt(reason == runs.StatusTimeout) {
				t.Fatalf("%s: %+v, %v", reason, st, err)
			}
			if st.Text != nil || st.Released || !strings.Contains(st.JournalProblem, "no entry for this finished run") {
				t.Fatalf("%s: text %v released %v journal_problem %q", reason, deref(st.Text), st.Released, st.JournalProblem)
			}
		}
	}

	// A journal torn mid-line by a crash: the torn line is not served.
	id := newRunID(t)
	p.journalRun(t, "beta", id, records("beta", runs.StatusCancelled, "", true), false)
	path := p.journalPath("beta", id)
	b := readFile(t, path)
	writeFile(t, path, b[:len(b)-9])
	st, err = m.Status(id)
	if err != nil || st.Status != runs.StatusAbandoned || st.Records != 2 || st.JournalProblem != "" {
		t.Fatalf("torn: %+v, %v; want abandoned with 2 records", st, err)
	}
	evs, err = events(t, m, id, 0, 10)
	if err != nil || len(evs.Events) != 2 || !evs.Done {
		t.Fatalf("torn: events %+v, %v", evs, err)
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// TestEndingExternalRunListedRunning: another server's run whose ledger entry is written but
// whose journal's terminated record is not yet (its writer holds the journal) is running,
// and list_runs {status: running} lists it, as run_status says.
func TestEndingExternalRunListedRunning(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	p.endingExternalRun(t, id)
	m := p.open(t)
	if st, err := m.Status(id); err != nil || st.Status != runs.StatusRunning {
		t.Fatalf("run_status: %+v, %v; want running", st, err)
	}
	listed := map[string]bool{}
	for _, s := range runs.Statuses {
		page, err := m.List(runs.Filter{Status: s})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Runs {
			if r.RunID == id {
				listed[s] = true
			}
		}
	}
	if !listed[runs.StatusRunning] || len(listed) != 1 {
		t.Errorf("list_runs lists the run under %v, want running only", listed)
	}
}

// TestRecovered: a recovered ledger entry (the file as found at start-up) is told as its
// journal says: its terminated reason, or abandoned without one.
func TestRecovered(t *testing.T) {
	tests := []struct {
		name   string
		reason string // the journal's terminated reason; "" for none
		state  string
		want   string
	}{
		{"complete, completed", runs.StatusCompleted, journal.StatusComplete, runs.StatusCompleted},
		{"complete, policy_denied", runs.StatusPolicyDenied, journal.StatusComplete, runs.StatusPolicyDenied},
		{"complete, cancelled", runs.StatusCancelled, journal.StatusComplete, runs.StatusCancelled},
		{"incomplete", "", journal.StatusIncomplete, runs.StatusAbandoned},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestProject(t, nil)
			id := newRunID(t)
			w := p.journalRun(t, "alpha", id, records("alpha", tt.reason, "text", true), false)
			m := p.open(t) // it knows the journal from disk first
			rec, err := ledger.Reconcile(p.lw, p.store.Dir(), p.pub)
			if err != nil || len(rec) != 1 || rec[0].State != tt.state {
				t.Fatalf("reconcile: %+v, %v; want state %s", rec, err, tt.state)
			}
			rc := w.Receipt()
			for _, m := range []*runs.Manager{m, p.open(t)} {
				if _, err := m.List(runs.Filter{}); err != nil {
					t.Fatal(err)
				}
				st, err := m.Status(id)
				if err != nil {
					t.Fatal(err)
				}
				if st.Status != tt.want || st.Released != (tt.want == runs.StatusCompleted) || st.Records != int64(rc.Records) || st.Head != rc.Head || st.JournalProblem != "" || st.Agent != "alpha" {
					t.Fatalf("status %+v; want %s with the journal's receipt", st, tt.want)
				}
				if tt.want == runs.StatusAbandoned && st.Reason == "" || tt.want != runs.StatusAbandoned && st.Reason != errText[tt.want] {
					t.Fatalf("reason %q", st.Reason)
				}
				evs, err := events(t, m, id, 0, 100)
				if err != nil || len(evs.Events) != rc.Records || !evs.Done {
					t.Fatalf("events %+v, %v", evs, err)
				}
			}
		})
	}
}

// ---- resolutions -------------------------------------------------------------------------

// TestResolve: each resolution value is recorded in the ledger and revises the last; the
// note's limit and the value are checked before anything is written.
func TestResolve(t *testing.T) {
	p := newTestProject(t, nil)
	id := p.run(t, "alpha", runs.StatusCompleted)
	m := p.open(t)
	revisions := 0
	for _, v := range runs.Resolutions {
		for _, note := range []string{"", "looks right", strings.Repeat("n", ledger.MaxNoteBytes)} {
			revisions++
			st, err := m.Resolve(id, v, note, runs.Caller{ID: "tester", Auth: "stdio"})
			if err != nil {
				t.Fatalf("%s %d-byte note: %v", v, len(note), err)
			}
			r := st.Resolution
			if r == nil || r.Value != v || r.Note != note || r.Caller != "tester" || r.Revisions != revisions || r.Time == "" {
				t.Fatalf("%s: resolution %+v; want revision %d", v, r, revisions)
			}
			if st.Status != runs.StatusCompleted {
				t.Fatalf("resolving changed the status to %s", st.Status)
			}
		}
	}
	refused := []struct {
		name        string
		value, note string
		code        errcode.Code
	}{
		{"note of 4097 bytes", "accepted", strings.Repeat("n", ledger.MaxNoteBytes+1), errcode.LimitExceeded},
		{"unknown value", "maybe", "", errcode.InvalidRequest},
		{"empty value", "", "", errcode.InvalidRequest},
		{"unresolved is a filter, not a value", runs.Unresolved, "", errcode.InvalidRequest},
		{"value in capitals", "ACCEPTED", "", errcode.InvalidRequest},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			before := len(readFile(t, p.ledgerPath()))
			_, err := m.Resolve(id, tt.value, tt.note, runs.Caller{ID: "tester", Auth: "stdio"})
			wantCode(t, err, tt.code)
			if after := len(readFile(t, p.ledgerPath())); after != before {
				t.Fatalf("a refused resolution wrote %d bytes to the ledger", after-before)
			}
		})
	}
	// Another Manager reads the same history from the ledger.
	st, err := p.open(t).Status(id)
	if err != nil || st.Resolution == nil || st.Resolution.Revisions != revisions || st.Resolution.Value != runs.Resolutions[len(runs.Resolutions)-1] {
		t.Fatalf("fresh manager: %v, %v", resolutionOf(st), err)
	}
	// A resolution another process records is seen by a Manager that already knows the run.
	p.resolve(t, id, "rejected", "by the CLI")
	st, err = m.Status(id)
	if err != nil || st.Resolution == nil || st.Resolution.Value != "rejected" || st.Resolution.Revisions != revisions+1 {
		t.Fatalf("after another process resolved: %v, %v", resolutionOf(st), err)
	}

	// Without a ledger writer nothing can be recorded.
	ro, err := runs.Open(runs.Config{Root: p.root})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ro.Resolve(id, "accepted", "", runs.Caller{ID: "tester", Auth: "stdio"})
	wantCode(t, err, errcode.AuditUnavailable, "no project ledger")

	// Cancel of a finished run answers with its status.
	st, finished, err := m.Cancel(context.Background(), id)
	if err != nil || !finished || st.Status != runs.StatusCompleted {
		t.Fatalf("cancel a finished run: %+v %v %v", st, finished, err)
	}
}

// ---- list_runs ---------------------------------------------------------------------------

// listed is what a test expects of one run in list_runs.
type listed struct {
	id, agent, status, resolution string
}

// manyRuns makes a project with n runs of two agents, every status but awaiting_approval,
// some resolved, some unknown to the ledger (one still being written), and returns them
// newest first.
func manyRuns(t testing.TB, n int) (*testProject, []listed) {
	t.Helper()
	p := newTestProject(t, nil)
	reasons := []string{runs.StatusCompleted, runs.StatusPolicyDenied, runs.StatusInferenceFailed, runs.StatusCancelled, runs.StatusTimeout, runs.StatusAuditFailed}
	var all []listed
	for i := range n {
		r := listed{id: newRunID(t), agent: []string{"alpha", "beta"}[i%2]}
		switch {
		case i%17 == 5: // a crash the ledger does not know yet
			p.journalRun(t, r.agent, r.id, records(r.agent, "", "", true), false)
			r.status = runs.StatusAbandoned
		case i == n-1: // another process's run
			p.journalRun(t, r.agent, r.id, records(r.agent, "", "", true), true)
			r.status = runs.StatusRunning
		default:
			r.status = reasons[i%len(reasons)]
			p.journalRun(t, r.agent, r.id, records(r.agent, r.status, "text", true), false)
			p.recordRun(t, r.agent, r.id, r.status)
		}
		if i%3 == 0 && r.status != runs.StatusRunning {
			r.resolution = runs.Resolutions[i%4]
			p.resolve(t, r.id, "superseded", "") // revised below
			p.resolve(t, r.id, r.resolution, "")
		}
		all = append(all, r)
	}
	slices.Reverse(all)
	return p, all
}

// page walks every page of list_runs with f and returns the run ids in order.
func walk(t *testing.T, m *runs.Manager, f runs.Filter) []string {
	t.Helper()
	var ids []string
	seen := map[string]bool{f.After: true}
	for pages := 0; ; pages++ {
		page, err := m.List(f)
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		limit := f.Limit
		if limit == 0 {
			limit = runs.DefaultLimit
		}
		if len(page.Runs) > limit || page.NextCursor != "" && len(page.Runs) != limit {
			t.Fatalf("page %d: %d runs with next cursor %q; limit %d", pages+1, len(page.Runs), page.NextCursor, limit)
		}
		for _, r := range page.Runs {
			ids = append(ids, r.RunID)
			if r.Text != nil {
				t.Fatalf("list_runs carried the text of %s", r.RunID)
			}
		}
		if page.NextCursor == "" {
			return ids
		}
		if seen[page.NextCursor] {
			t.Fatalf("page %d: cursor %q again", pages+1, page.NextCursor)
		}
		seen[page.NextCursor] = true
		f.After = page.NextCursor
	}
}

func ids(rs []listed, keep func(listed) bool) []string {
	out := []string{}
	for _, r := range rs {
		if keep(r) {
			out = append(out, r.id)
		}
	}
	return out
}

// TestList: paging through list_runs yields every run exactly once, newest first, at any
// page size and with every filter.
func TestList(t *testing.T) {
	p, all := manyRuns(t, 250)
	m := p.open(t)
	every := func(listed) bool { return true }
	tests := []struct {
		name string
		f    runs.Filter
		keep func(listed) bool
	}{
		{"all, default limit", runs.Filter{}, every},
		{"all, limit 1", runs.Filter{Limit: 1}, every},
		{"all, limit 7", runs.Filter{Limit: 7}, every},
		{"all, limit 100", runs.Filter{Limit: 100}, every},
		{"all, limit 1000", runs.Filter{Limit: runs.MaxLimit}, every},
		{"agent by declared name", runs.Filter{Agent: "alpha", Limit: 7}, func(r listed) bool { return r.agent == "alpha" }},
		{"agent by agent_id", runs.Filter{Agent: policy.AgentID("beta"), Limit: 7}, func(r listed) bool { return r.agent == "beta" }},
		{"unknown agent", runs.Filter{Agent: "gamma"}, func(listed) bool { return false }},
		{"unresolved", runs.Filter{Resolution: runs.Unresolved, Limit: 7}, func(r listed) bool { return r.resolution == "" }},
		{"unresolved beta", runs.Filter{Resolution: runs.Unresolved, Agent: "beta", Limit: 3}, func(r listed) bool { return r.resolution == "" && r.agent == "beta" }},
	}
	for _, s := range runs.Statuses {
		tests = append(tests, struct {
			name string
			f    runs.Filter
			keep func(listed) bool
		}{"status " + s, runs.Filter{Status: s, Limit: 7}, func(r listed) bool { return r.status == s }})
	}
	for _, v := range runs.Resolutions {
		tests = append(tests, struct {
			name string
			f    runs.Filter
			keep func(listed) bool
		}{"resolution " + v, runs.Filter{Resolution: v, Limit: 5}, func(r listed) bool { return r.resolution == v }})
	}
	tests = append(tests, struct {
		name string
		f    runs.Filter
		keep func(listed) bool
	}{"alpha completed accepted", runs.Filter{Agent: "alpha", Status: runs.StatusCompleted, Resolution: "accepted", Limit: 1}, func(r listed) bool {
		return r.agent == "alpha" && r.status == runs.StatusCompleted && r.resolution == "accepted"
	}})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, want := walk(t, m, tt.f), ids(all, tt.keep)
			if !slices.Equal(got, want) {
				t.Fatalf("listed %d runs, want %d:\n got %v\nwant %v", len(got), len(want), got, want)
			}
		})
	}

	// What each listed run says matches the project.
	page, err := m.List(runs.Filter{Limit: runs.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range page.Runs {
		r := all[i]
		if st.RunID != r.id || st.Agent != r.agent || st.AgentID != policy.AgentID(r.agent) || st.Status != r.status || st.JournalProblem != "" {
			t.Fatalf("run %d: %+v; want %+v", i, st, r)
		}
		got := ""
		if st.Resolution != nil {
			if got = st.Resolution.Value; st.Resolution.Revisions != 2 {
				t.Fatalf("run %d: %d revisions, want 2", i, st.Resolution.Revisions)
			}
		}
		if got != r.resolution {
			t.Fatalf("run %d: resolution %q, want %q", i, got, r.resolution)
		}
	}
}

// TestListArguments: limits and filters out of range, and cursors list_runs never gave,
// are refused; a cursor naming a run id pages from below it.
func TestListArguments(t *testing.T) {
	p, all := manyRuns(t, 120)
	m := p.open(t)
	cursor := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	refused := []struct {
		name string
		f    runs.Filter
	}{
		{"limit 1001", runs.Filter{Limit: runs.MaxLimit + 1}},
		{"limit -1", runs.Filter{Limit: -1}},
		{"unknown status", runs.Filter{Status: "done"}},
		{"unknown resolution", runs.Filter{Resolution: "maybe"}},
		{"cursor not base64", runs.Filter{After: "!!!"}},
		{"cursor with padding", runs.Filter{After: base64.URLEncoding.EncodeToString([]byte("r1:run-1"))}},
		{"cursor with standard base64 characters", runs.Filter{After: "cjE6+/+/"}},
		{"cursor of the prefix only", runs.Filter{After: cursor("r1:")}},
		{"cursor of another version", runs.Filter{After: cursor("r2:" + all[3].id)}},
		{"cursor without its prefix", runs.Filter{After: cursor(all[3].id)}},
		{"cursor that is a plain run id", runs.Filter{After: all[3].id}},
		{"cursor naming a path", runs.Filter{After: cursor("r1:../x")}},
		{"cursor of 200 bytes", runs.Filter{After: cursor("r1:" + strings.Repeat("a", 200))}},
		{"cursor of unicode", runs.Filter{After: cursor("r1:ü")}},
		{"cursor one byte short", runs.Filter{After: cursor("r1:" + all[3].id)[1:]}},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.List(tt.f)
			wantCode(t, err, errcode.InvalidRequest)
		})
	}
	t.Run("limit 0 is the default", func(t *testing.T) {
		page, err := m.List(runs.Filter{})
		if err != nil || len(page.Runs) != runs.DefaultLimit || page.NextCursor == "" {
			t.Fatalf("%d runs, next %q, %v", len(page.Runs), page.NextCursor, err)
		}
	})
	t.Run("forged cursor of a run id", func(t *testing.T) {
		page, err := m.List(runs.Filter{After: cursor("r1:" + all[9].id), Limit: 5})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := statusIDs(page.Runs), ids(all[10:15], func(listed) bool { return true }); !slices.Equal(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	})
	t.Run("forged cursor below every run", func(t *testing.T) {
		page, err := m.List(runs.Filter{After: cursor("r1:0")})
		if err != nil || len(page.Runs) != 0 || page.NextCursor != "" {
			t.Fatalf("%+v, %v", page, err)
		}
	})
	t.Run("forged cursor above every run", func(t *testing.T) {
		page, err := m.List(runs.Filter{After: cursor("r1:z"), Limit: 3})
		if err != nil || !slices.Equal(statusIDs(page.Runs), ids(all[:3], func(listed) bool { return true })) {
			t.Fatalf("%+v, %v", page, err)
		}
	})
}

func statusIDs(sts []runs.Status) []string {
	out := []string{}
	for _, s := range sts {
		out = append(out, s.RunID)
	}
	return out
}

// TestListNewRuns: runs that begin while a caller pages are not listed on later pages
// (they are newer than the cursor), and no run is skipped or listed twice.
func TestListNewRuns(t *testing.T) {
	p, all := manyRuns(t, 20)
	m := p.open(t)
	var got []string
	f := runs.Filter{Limit: 3}
	for {
		page, err := m.List(f)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, statusIDs(page.Runs)...)
		p.run(t, "alpha", runs.StatusCancelled) // newer than any listed
		if page.NextCursor == "" {
			break
		}
		f.After = page.NextCursor
	}
	if want := ids(all, func(listed) bool { return true }); !slices.Equal(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

// ---- run_events cursors ------------------------------------------------------------------

// TestEventsCursor: paging through a run's events at every page size yields each line
// once, in order, exactly as signed; done comes only with the last page of an ended run.
func TestEventsCursor(t *testing.T) {
	p := newTestProject(t, nil)
	id := p.run(t, "alpha", runs.StatusCompleted)
	lines := completeLines(readFile(t, p.journalPath("alpha", id)))
	if len(lines) != 5 {
		t.Fatalf("%d lines", len(lines))
	}
	m := p.open(t)
	if !m.PublicKey().Equal(p.pub) {
		t.Fatal("the Manager's public key is not the project's")
	}
	for limit := 1; limit <= 7; limit++ {
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
			var got []runs.Event
			after := int64(0)
			for pages := 1; ; pages++ {
				evs, err := events(t, m, id, after, limit)
				if err != nil {
					t.Fatal(err)
				}
				if evs.NextCursor != after+int64(len(evs.Events)) || len(evs.Events) > limit || evs.Status != runs.StatusCompleted {
					t.Fatalf("page %d after %d: %d events, next %d", pages, after, len(evs.Events), evs.NextCursor)
				}
				if evs.Done != (evs.NextCursor == 5) {
					t.Fatalf("page %d: done %v at cursor %d", pages, evs.Done, evs.NextCursor)
				}
				got = append(got, evs.Events...)
				after = evs.NextCursor
				if evs.Done {
					break
				}
				if len(evs.Events) == 0 || pages > 5 {
					t.Fatalf("page %d: no progress", pages)
				}
			}
			checkEvents(t, got, lines, id, p.pub)
			for k, ev := range got {
				if ev.Seq != int64(k) || ev.Type == "" || ev.Time == "" {
					t.Fatalf("event %d: %+v", k, ev)
				}
			}
			if len(got) != 5 || got[0].Type != journal.TypeStarted || got[4].Type != journal.TypeTerminated {
				t.Fatalf("%d events", len(got))
			}
		})
	}
	refused := []struct {
		name  string
		after int64
		limit int
		wait  int64 // milliseconds
	}{
		{"after beyond the end", 6, 10, 0},
		{"after far beyond the end", 1 << 62, 10, 0},
		{"after the largest int64", 1<<63 - 1, runs.MaxLimit, 0},
		{"negative after", -1, 10, 0},
		{"limit 1001", 0, runs.MaxLimit + 1, 0},
		{"negative limit", 0, -1, 0},
		{"negative wait", 0, 10, -1},
		{"wait beyond the longest", 0, 10, runs.MaxWait.Milliseconds() + 1},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := m.Events(context.Background(), id, tt.after, tt.limit, msDuration(tt.wait))
			if evs != nil {
				t.Fatalf("served %+v", evs)
			}
			wantCode(t, err, errcode.InvalidRequest)
		})
	}
	t.Run("limit 0 is the default", func(t *testing.T) {
		evs, err := events(t, m, id, 0, 0)
		if err != nil || len(evs.Events) != 5 || !evs.Done {
			t.Fatalf("%+v, %v", evs, err)
		}
	})
	t.Run("a long poll on an ended run answers at once", func(t *testing.T) {
		evs, err := m.Events(context.Background(), id, 5, 10, runs.MaxWait)
		if err != nil || len(evs.Events) != 0 || !evs.Done {
			t.Fatalf("%+v, %v", evs, err)
		}
	})
}

// resolutionOf says what a failing test needs of a status's resolution (not its note).
func resolutionOf(st *runs.Status) string {
	if st == nil || st.Resolution == nil {
		return "no resolution"
	}
	return fmt.Sprintf("%s (revision %d, %d-byte note)", st.Resolution.Value, st.Resolution.Revisions, len(st.Resolution.Note))
}

// TestJournalAlteredAfterRead: a journal altered after a Manager has served some of its
// events is verified again: the lines it verified before are not trusted once their bytes
// change, whichever page is asked for next.
func TestJournalAlteredAfterRead(t *testing.T) {
	tests := []struct {
		name  string
		alter func(ls [][]byte) [][]byte
		bad   int
	}{
		{"byte flipped in line 2", func(ls [][]byte) [][]byte { ls[1] = flipByte(ls[1], 30); return ls }, 1},
		{"line 1 deleted", func(ls [][]byte) [][]byte { return ls[1:] }, 0},
		{"lines 3 and 4 swapped", func(ls [][]byte) [][]byte { ls[2], ls[3] = ls[3], ls[2]; return ls }, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestProject(t, nil)
			id := p.run(t, "alpha", runs.StatusCompleted)
			m := p.open(t)
			// Pages up to and including the line to be altered: the Manager has verified
			// those lines, and a later page would begin beyond them.
			for after := int64(0); after <= int64(tt.bad); after++ {
				if _, err := events(t, m, id, after, 1); err != nil {
					t.Fatal(err)
				}
			}
			editLines(t, p.journalPath("alpha", id), tt.alter)
			for after := int64(4); after >= int64(tt.bad); after-- {
				evs, err := events(t, m, id, after, 1)
				if err == nil {
					t.Fatalf("after %d: served %+v from an altered journal", after, evs)
				}
				wantCode(t, err, errcode.AuditUnavailable, fmt.Sprintf("journal line %d: ", tt.bad+1))
			}
		})
	}
}

// TestReviewRegressions: a journal cut short after its facts were read is noticed at the
// next answer; a removed ledger fails every answer closed; another process's run of an
// agent this index does not know is found (through the directory's listing, not a glob
// pattern).
func TestReviewRegressions(t *testing.T) {
	t.Run("journal cut short after its facts were read", func(t *testing.T) {
		p := newTestProject(t, nil)
		id := p.run(t, "alpha", runs.StatusCompleted)
		m := p.open(t)
		if st, err := m.Status(id); err != nil || st.JournalProblem != "" || st.Text == nil {
			t.Fatalf("before: %+v, %v", st, err)
		}
		path := p.journalPath("alpha", id)
		writeFile(t, path, bytes.Join(completeLines(readFile(t, path))[:2], nil))
		st, err := m.Status(id)
		if err != nil || st.JournalProblem == "" || st.Text != nil || st.Released {
			t.Fatalf("after cutting the journal: %+v, %v; want a journal_problem and no text", st, err)
		}
		if _, err := events(t, m, id, 2, 100); errcode.Of(err) != errcode.AuditUnavailable {
			t.Fatalf("events at the cut: %v; want audit_unavailable", err)
		}
	})
	t.Run("ledger removed", func(t *testing.T) {
		p := newTestProject(t, nil)
		id := p.run(t, "alpha", runs.StatusCompleted)
		m := p.open(t)
		if err := os.Remove(p.ledgerPath()); err != nil {
			t.Fatal(err)
		}
		_, err := m.Status(id)
		wantCode(t, err, errcode.AuditUnavailable, "removed")
		_, err = m.List(runs.Filter{})
		wantCode(t, err, errcode.AuditUnavailable, "removed")
	})
	t.Run("another process's run of an agent the index does not know", func(t *testing.T) {
		p := newTestProject(t, nil)
		m := p.open(t)
		// A run of an agent the index has never seen, begun after it was built.
		id := newRunID(t)
		w := p.journalRun(t, "gamma[1]*?", id, records("gamma[1]*?", runs.StatusCompleted, "x", true)[:2], true)
		defer w.Close()
		st, err := m.Status(id)
		if err != nil || st.Status != runs.StatusRunning {
			t.Fatalf("another process's run: %+v, %v", st, err)
		}
	})
}

// TestLedgerEntryNamesAnotherFile: a signed entry whose file is not its run's journal name
// (a path, another run's file) is not what a server writes; answers fail closed.
func TestLedgerEntryNamesAnotherFile(t *testing.T) {
	for _, file := range []string{"../../etc/passwd", "x.jsonl"} {
		t.Run(file, func(t *testing.T) {
			p := newTestProject(t, nil)
			id := p.run(t, "alpha", runs.StatusCompleted)
			if _, err := p.lw.Append(ledger.Run{RunID: newRunID(t), AgentID: policy.AgentID("alpha"), Agent: "alpha", File: file, Reason: "completed", Released: true}); err != nil {
				t.Fatal(err)
			}
			_, err := runs.Open(runs.Config{Root: p.root, Ledger: p.lw})
			wantCode(t, err, errcode.AuditUnavailable, "not its journal")
			m := runs.New(runs.Config{Root: p.root})
			_, err = m.Status(id)
			wantCode(t, err, errcode.AuditUnavailable, "not its journal")
		})
	}
}

// TestIndexFromOpenedLedger: a server's Manager starts from the lines its ledger Writer
// verified at Open (start-up verifies the ledger once) and knows what a Manager that
// reads the whole ledger knows; lines appended after the Writer opened are read and
// verified as before, and a Writer of another key is not taken at its word.
func TestIndexFromOpenedLedger(t *testing.T) {
	p, all := manyRuns(t, 150)
	lw, err := ledger.Open(p.root, p.store.SigningKey())
	if err != nil {
		t.Fatal(err)
	}
	defer lw.Close()
	// Appended after lw verified the ledger: the index must read and verify it itself.
	later := p.run(t, "alpha", runs.StatusCompleted)
	all = append([]listed{{id: later, agent: "alpha", status: runs.StatusCompleted}}, all...)
	m := runs.New(runs.Config{Root: p.root, Ledger: lw})
	if lw.TakeOpened() != nil {
		t.Fatal("the Manager did not take the Writer's opened lines")
	}
	every := func(listed) bool { return true }
	if got, want := walk(t, m, runs.Filter{Limit: 7}), ids(all, every); !slices.Equal(got, want) {
		t.Fatalf("listed %d runs, want %d:\n got %v\nwant %v", len(got), len(want), got, want)
	}
	fresh := p.open(t)
	for _, f := range []runs.Filter{{Limit: runs.MaxLimit}, {Status: runs.StatusCompleted, Limit: runs.MaxLimit}, {Resolution: "accepted", Limit: runs.MaxLimit}} {
		a, err := m.List(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := fresh.List(f)
		if err != nil {
			t.Fatal(err)
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if !bytes.Equal(ja, jb) {
			t.Fatalf("filter %+v: from the opened ledger\n%s\nread whole\n%s", f, ja, jb)
		}
	}

	// A later line that does not verify still stops the index.
	p.resolve(t, later, "accepted", "")
	editLines(t, p.ledgerPath(), func(ls [][]byte) [][]byte { ls[len(ls)-1] = flipByte(ls[len(ls)-1], 30); return ls })
	_, err = m.List(runs.Filter{})
	wantCode(t, err, errcode.AuditUnavailable, "signature does not verify")

	// A Writer of another key (another project's): the Manager does not take its lines and
	// reads its own project's ledger itself.
	q := newTestProject(t, bytes.Repeat([]byte{7}, 32))
	other := runs.New(runs.Config{Root: p.root, Ledger: q.lw})
	if q.lw.TakeOpened() == nil {
		t.Fatal("the Manager took the lines of a Writer of another key")
	}
	_, err = other.List(runs.Filter{})
	wantCode(t, err, errcode.AuditUnavailable, "signature does not verify") // the line flipped above
}

// TestScanAfterFailedFirstRead: when the first read of the ledger fails for a while (here
// a symlink in its place, which is refused without following it), the journals the
// ledger does not know are listed once it can be read again.
func TestScanAfterFailedFirstRead(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	p.journalRun(t, "alpha", id, records("alpha", "", "", true), false)
	aside := p.ledgerPath() + ".aside"
	if err := os.Rename(p.ledgerPath(), aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(aside, p.ledgerPath()); err != nil {
		t.Fatal(err)
	}
	m := runs.New(runs.Config{Root: p.root})
	if _, err := m.List(runs.Filter{}); err == nil {
		t.Fatal("list with a symlink as the ledger: no error")
	}
	if err := os.Remove(p.ledgerPath()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(aside, p.ledgerPath()); err != nil {
		t.Fatal(err)
	}
	page, err := m.List(runs.Filter{})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].RunID != id || page.Runs[0].Status != runs.StatusAbandoned {
		t.Fatalf("list once the ledger reads: %+v, %v; want the journal on disk, abandoned", page, err)
	}
}

// endingExternalRun is another server's run of helper, completed, in the moment between
// its ledger entry and its journal's terminated line (invoke's endRun): the journal holds
// started … policy_evaluated allow and its writer (returned) holds it; the terminated
// line is signed (prep), not yet written.
func (p *testProject) endingExternalRun(t *testing.T, id string) (*journal.Writer, *journal.Prepared) {
	t.Helper()
	w, prep, entry := p.externalRunInFlight(t, id)
	if _, err := p.lw.Append(entry); err != nil {
		t.Fatal(err)
	}
	return w, prep
}

// externalRunInFlight is another process's run of helper in flight, completing: its
// journal written but for its terminated record (prep, prepared) and held by its writer
// w, and the run entry its server appends to the ledger when it ends.
func (p *testProject) externalRunInFlight(t *testing.T, id string) (*journal.Writer, *journal.Prepared, ledger.Run) {
	t.Helper()
	all := records("helper", runs.StatusCompleted, "the answer", true)
	w := p.journalRun(t, "helper", id, all[:len(all)-1], true)
	prevHead := w.Receipt().Head
	prep, err := w.Prepare(all[len(all)-1])
	if err != nil {
		t.Fatal(err)
	}
	return w, prep, ledger.Run{RunID: id, AgentID: policy.AgentID("helper"), Agent: "helper",
		File: journal.FileName(policy.AgentID("helper"), id), Reason: runs.StatusCompleted, Released: true,
		Records: int64(prep.Receipt.Records), Head: prep.Receipt.Head, PrevHead: prevHead, Caller: "stdio"}
}

// TestOtherProcessEndingIsRunning: another server makes a run's ledger entry durable just
// before it writes the journal's terminated record (invoke's endRun). In between, with
// its writer still holding the journal, the run is running and run_events is not done:
// not audit_failed, which would be "done" and wrong a moment later.
func TestOtherProcessEndingIsRunning(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	w, prep := p.endingExternalRun(t, id)
	m := p.open(t) // this server (or `symbi runs`) reads the project meanwhile
	evs, err := m.Events(context.Background(), id, 0, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	first := *evs
	// The other server goes on: its terminated line is written.
	if err := w.AppendPrepared(prep); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	more, err := m.Events(context.Background(), id, first.NextCursor, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if first.Done || first.Status != runs.StatusRunning {
		t.Errorf("run_events while the other server's writer still holds the journal: status %s, done %v; want running, not done", first.Status, first.Done)
	}
	if len(more.Events) != 1 || more.Events[0].Type != journal.TypeTerminated || !more.Done || st.Status != runs.StatusCompleted || !st.Released {
		t.Errorf("after the terminated record: %d more events, done %v, status %s, released %v; want the terminated event, done, completed and released",
			len(more.Events), more.Done, st.Status, st.Released)
	}
}

// TestRecoveredEntryKeepsOwner: a recovered entry names the run's caller (from its
// verified started record); once the journal is pruned, the run's owner is still that
// caller — not the stdio default — so that its access decisions stay its owner's.
func TestRecoveredEntryKeepsOwner(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	agentID := policy.AgentID("helper")
	file := journal.FileName(agentID, id)
	if _, err := p.lw.Append(ledger.Recovered{RunID: id, AgentID: agentID, File: file, State: "incomplete", Records: 2,
		Head: strings.Repeat("a", 64), Caller: "alice", CallerAuth: "token"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.lw.Append(ledger.Pruned{RunID: id, File: file, Records: 2, Head: strings.Repeat("a", 64)}); err != nil {
		t.Fatal(err)
	}
	st, err := p.open(t).Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if !st.JournalPruned || st.Caller != "alice" || st.CallerAuth != "token" {
		t.Fatalf("pruned recovered run: pruned %v, caller %q (%q); want pruned, alice (token)", st.JournalPruned, st.Caller, st.CallerAuth)
	}
}

// TestReevaluatedDenyEndsWait: another server resumed a held answer, and the new policy
// set denies it otherwise than at the gate (policy_reevaluated, deny, no gate): the wait
// is over — until its terminated record is written the run is running, as run_events
// says, not awaiting_approval.
func TestReevaluatedDenyEndsWait(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	text := "the held answer"
	recs := records("helper", runs.StatusPolicyDenied, text, true)
	recs = recs[:len(recs)-1] // started … policy_evaluated deny
	ev := recs[len(recs)-1].(journal.PolicyEvaluated)
	ev.Gate, ev.PolicyIDs = "review", []string{"review"}
	recs[len(recs)-1] = ev
	recs = append(recs,
		journal.ApprovalRequested{Gate: "review", TextSHA256: sum(text), TextBytes: int64(len(text)), TimeoutMS: 600000},
		journal.PolicyReevaluated{PolicyMode: "cedar", PolicyDigest: strings.Repeat("b", 64), Decision: "deny", PolicyIDs: []string{"other"},
			Errors: []string{}, TextSHA256: sum(text)})
	p.journalRun(t, "helper", id, recs, true) // the other server's writer holds it
	m := p.open(t)
	st, err := m.Status(id)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := m.Events(context.Background(), id, 0, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != runs.StatusRunning || evs.Status != runs.StatusRunning || evs.Done {
		t.Fatalf("run_status %s, run_events %s (done %v); want both running", st.Status, evs.Status, evs.Done)
	}
}

// TestIndexRefusesSymbiontSymlink: someone with write access to project A's directory,
// but none to A/.symbiont, renames .symbiont away (a rename within its parent needs no
// permission on .symbiont) and leaves a symbolic link to another project's in its place,
// the two sharing a signing key. The run index reads the ledger and the journals from the
// pinned project directory without following a link, as the journal writer and the store
// do: A's server lists and serves none of B's runs, and says why.
func TestIndexRefusesSymbiontSymlink(t *testing.T) {
	seed := bytes.Repeat([]byte{9}, ed25519.SeedSize)
	a := newTestProject(t, seed)
	b := newTestProject(t, seed)
	secret := b.run(t, "alpha", runs.StatusCompleted) // "the answer", in clear, in B only

	m := a.open(t) // A's server: no run has ended in A yet
	if page, err := m.List(runs.Filter{}); err != nil || len(page.Runs) != 0 {
		t.Fatalf("A before the swap: %+v, %v", page, err)
	}

	sym := filepath.Join(a.dir, ".symbiont")
	if err := os.Rename(sym, filepath.Join(a.dir, ".symbiont-old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(b.dir, ".symbiont"), sym); err != nil {
		t.Fatal(err)
	}

	page, err := m.List(runs.Filter{})
	if err == nil {
		t.Fatalf("A's list_runs, after A/.symbiont became a symlink to B's: %d run(s) and no error; want audit_unavailable naming the link", len(page.Runs))
	}
	wantCode(t, err, errcode.AuditUnavailable, "symbolic link")
	st, err := m.Status(secret)
	if err == nil {
		text := ""
		if st.Text != nil {
			text = *st.Text
		}
		t.Errorf("A's run_status serves project B's run %s: status %s, text %q", secret, st.Status, text)
	}
	if evs, err := events(t, m, secret, 0, 10); err == nil {
		t.Errorf("A's run_events serves %d signed events of project B's run", len(evs.Events))
	}
}

// TestExternalLongPoll: run_events with wait_ms on another process's run in flight waits —
// looked at every ExternalPoll, there being no writer here to wake it — until an event is
// durable (it answers with the event), or the run ends though its journal does not change
// (its process stops: the writer lets go without a terminated record; it answers done,
// abandoned), not at once with nothing, nor at the end of its wait.
func TestExternalLongPoll(t *testing.T) {
	all := records("helper", runs.StatusCompleted, "the answer", true)
	for _, tt := range []struct {
		name   string
		change func(t *testing.T, w *journal.Writer)
		want   func(evs *runs.Events) bool
	}{
		{"an event", func(t *testing.T, w *journal.Writer) {
			if err := w.Append(all[2]); err != nil {
				t.Fatal(err)
			}
			if err := w.Sync(); err != nil {
				t.Fatal(err)
			}
		}, func(evs *runs.Events) bool {
			return len(evs.Events) == 1 && evs.Events[0].Type == journal.TypeInferenceFinished && !evs.Done
		}},
		{"the writer gone", func(t *testing.T, w *journal.Writer) {
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		}, func(evs *runs.Events) bool {
			return len(evs.Events) == 0 && evs.Done && evs.Status == runs.StatusAbandoned
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestProject(t, nil)
			id := newRunID(t)
			w := p.journalRun(t, "helper", id, all[:2], true) // started, inference_requested; the writer holds it
			m := p.open(t)
			waiting := make(chan struct{})
			runs.SetTestExternalWait(func() { close(waiting) })
			defer runs.SetTestExternalWait(nil)
			type answer struct {
				evs *runs.Events
				err error
			}
			got := make(chan answer, 1)
			go func() {
				evs, err := m.Events(context.Background(), id, 2, runs.MaxLimit, runs.MaxWait) // a bound only
				got <- answer{evs, err}
			}()
			select {
			case <-waiting: // the call found nothing and waits: the change comes after
			case a := <-got:
				t.Fatalf("a long poll of another process's run answered at once: %+v, %v", a.evs, a.err)
			}
			tt.change(t, w)
			if a := <-got; a.err != nil || a.evs == nil || !tt.want(a.evs) {
				t.Fatalf("the long poll after %s: %+v, %v", tt.name, a.evs, a.err)
			}
		})
	}
}

// TestJournalSymlinkNamed: a journal replaced by a symbolic link is refused without
// following it, and the refusal names the rule, not only the kernel's "too many levels of
// symbolic links".
func TestJournalSymlinkNamed(t *testing.T) {
	p := newTestProject(t, nil)
	id := p.run(t, "alpha", runs.StatusCompleted)
	path := p.journalPath("alpha", id)
	moved := filepath.Join(p.dir, "elsewhere.jsonl")
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(moved, path); err != nil {
		t.Fatal(err)
	}
	m := p.open(t)
	_, err := events(t, m, id, 0, 10)
	if err == nil {
		t.Fatal("run_events read through a symlinked journal")
	}
	if msg := err.Error(); !strings.Contains(msg, "symbolic link") || !strings.Contains(msg, "without following") {
		t.Errorf("run_events of a journal replaced by a symbolic link: %q; want the rule named (a symbolic link, not followed)", msg)
	}
}

// TestRecoveredJournalOneLineShort: only a run entry's journal may lack its last line
// (ending at the entry's prev_head); a journal recorded as found (a recovered entry, which
// has no prev_head) cut by one line is reported as not what the ledger recorded.
func TestRecoveredJournalOneLineShort(t *testing.T) {
	p := newTestProject(t, nil)
	crashed := newRunID(t)
	p.journalRun(t, "alpha", crashed, records("alpha", "", "text", true), false)
	if _, err := ledger.Reconcile(p.lw, p.store.Dir(), p.pub); err != nil {
		t.Fatal(err)
	}
	path := p.journalPath("alpha", crashed)
	ls := completeLines(readFile(t, path))
	writeFile(t, path, bytes.Join(ls[:len(ls)-1], nil))
	m := p.open(t)
	st, err := m.Status(crashed)
	if err != nil {
		t.Fatal(err)
	}
	if st.JournalProblem == "" {
		t.Fatalf("a recovered run's journal cut by one line (%d of %d records) has no journal_problem: status %+v", len(ls)-1, len(ls), st)
	}
}
