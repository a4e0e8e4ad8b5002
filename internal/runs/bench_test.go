package runs_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/policy"
	"symbi/internal/runs"
)

// The fixtures are written the fast way: each journal line is made with journal.Seal, as
// the journal writer makes it (the writer's state machine only takes the five records of a
// model run), the files are written without fsync, and the ledger entries are appended
// through a ledger.Writer from several goroutines, so they share its fsyncs.

// benchProject is a project with a governed store, its key and its ledger.
type benchProject struct {
	dir  string
	root *os.File
	gov  string
	key  ed25519.PrivateKey
	lw   *ledger.Writer
}

func newBenchProject(b *testing.B) *benchProject {
	b.Helper()
	dir := b.TempDir()
	root, err := os.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { root.Close() })
	lw, _, err := ledger.OpenProject(root, "")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { lw.Close() })
	store, err := journal.OpenStore(root, journal.StoreOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	return &benchProject{dir: dir, root: root, gov: store.Dir(), key: store.SigningKey(), lw: lw}
}

// open is runs.Open on the project: the cold index build (a read-only Manager).
func (p *benchProject) open(b *testing.B) *runs.Manager {
	m, err := runs.Open(runs.Config{Root: p.root})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// benchRun describes one run of a fixture.
type benchRun struct {
	id, agent, agentID, reason string
	start                      time.Time
	middle                     []string // the types of the records between started and terminated
}

// benchRunID is a UUIDv7-shaped run id; ids sort in the order of i.
func benchRunID(i int) string {
	ms := uint64(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).UnixMilli()) + uint64(i)
	return fmt.Sprintf("%08x-%04x-7%03x-8%03x-%012x", ms>>16, ms&0xffff, i&0xfff, (i>>12)&0xfff, uint64(i)*2654435761&0xffffffffffff)
}

// benchPayload is a journal payload with its members in the order the writer uses.
type benchPayload struct {
	V       int             `json:"v"`
	RunID   string          `json:"run_id"`
	Seq     int64           `json:"seq"`
	Prev    string          `json:"prev"`
	Time    string          `json:"time"`
	AgentID string          `json:"agent_id"`
	Type    string          `json:"type"`
	Data    json.RawMessage `json:"data"`
}

// writeBenchJournal writes r's journal to dir, each line sealed with key, and returns the
// ledger entry of the run.
func writeBenchJournal(dir string, key ed25519.PrivateKey, r benchRun) (ledger.Run, error) {
	types := append(append([]string{journal.TypeStarted}, r.middle...), journal.TypeTerminated)
	released := r.reason == runs.StatusCompleted
	var buf []byte
	prev, prevHead := journal.ZeroHash, journal.ZeroHash
	for seq, typ := range types {
		var data any
		switch {
		case seq == 0:
			data = journal.Started{Agent: r.agent, File: "agents/" + r.agent + ".symbi", Mode: "text_response", Surface: "mcp-server",
				Caller: "stdio", ServerVersion: "bench", Provider: "openai", Model: "bench", PolicyMode: "cedar", PromptBytes: 5, Prompt: "hello"}
		case seq == len(types)-1:
			t := journal.Terminated{Reason: r.reason, Released: released, DurationMS: int64(len(types))}
			if !released {
				t.Error = "the response was denied by policy no-keys"
			}
			data = t
		case typ == journal.TypeInferenceFinished:
			data = journal.InferenceFinished{CallID: "c1", Outcome: "completed", HTTPStatus: 200, TextBytes: 2, FinishReason: "stop", Text: "ok"}
		default:
			data = map[string]any{"n": seq, "text": "a message of the agent, as a multi-step run would journal it"}
		}
		d, err := json.Marshal(data)
		if err != nil {
			return ledger.Run{}, err
		}
		p, err := json.Marshal(benchPayload{V: 1, RunID: r.id, Seq: int64(seq), Prev: prev,
			Time: r.start.Add(time.Duration(seq) * time.Millisecond).UTC().Format("2006-01-02T15:04:05.000Z"), AgentID: r.agentID, Type: typ, Data: d})
		if err != nil {
			return ledger.Run{}, err
		}
		line := journal.Seal(key, journal.SignatureContext, p)
		buf = append(buf, line...)
		sum := sha256.Sum256(line)
		prevHead, prev = prev, hex.EncodeToString(sum[:])
	}
	file := journal.FileName(r.agentID, r.id)
	if err := os.WriteFile(filepath.Join(dir, file), buf, 0o600); err != nil {
		return ledger.Run{}, err
	}
	return ledger.Run{RunID: r.id, AgentID: r.agentID, Agent: r.agent, File: file, Reason: r.reason, Released: released,
		Records: int64(len(types)), Head: prev, PrevHead: prevHead, Caller: "stdio"}, nil
}

// benchSigFloor reads a signed log file and checks every line's signature (journal.Open) and
// nothing else: the work reading it verified cannot avoid.
func benchSigFloor(b *testing.B, path string, pub ed25519.PublicKey, context string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var msg []byte
	n := 0
	for len(data) > 0 {
		i := 0
		for data[i] != '\n' {
			i++
		}
		if _, err := journal.Open(data[:i+1], pub, context, &msg); err != nil {
			b.Fatal(err)
		}
		data = data[i+1:]
		n++
	}
	return n
}

// benchReadEvents reads every event of runID in pages of limit and returns how many it read.
func benchReadEvents(b *testing.B, m *runs.Manager, runID string, limit int) int {
	var after int64
	n := 0
	for {
		evs, err := m.Events(context.Background(), runID, after, limit, 0)
		if err != nil {
			b.Fatal(err)
		}
		n += len(evs.Events)
		after = evs.NextCursor
		if evs.Done {
			return n
		}
		if len(evs.Events) == 0 {
			b.Fatalf("run %s: no event after %d and not done (status %s)", runID, after, evs.Status)
		}
	}
}

// BenchmarkRunEvents measures reading every event of a run of 1,000 journal records —
// started, 998 agent_message records, terminated — through runs.Manager.Events, in pages
// of 100 and of 1,000: cold (runs.Open, then the whole run) and warm (the same Manager
// again, its facts of the ended run cached), side by side with the floor (read the file
// and check each line's signature). (A finished journal the ledger has no entry for is not
// measured: its events are refused past the records that carry no text — a journal
// placed in the directory, or a lost entry; see docs/runs.md.)
func BenchmarkRunEvents(b *testing.B) {
	const records = 1000
	p := newBenchProject(b)
	middle := make([]string, records-2)
	for i := range middle {
		middle[i] = "agent_message"
	}
	agentID := policy.AgentID("helper")
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	recorded := benchRun{id: benchRunID(1), agent: "helper", agentID: agentID, reason: runs.StatusCompleted, start: t0, middle: middle}
	e, err := writeBenchJournal(p.gov, p.key, recorded)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.lw.Append(e); err != nil {
		b.Fatal(err)
	}
	pub := p.key.Public().(ed25519.PublicKey)

	for _, c := range []struct {
		name  string
		run   benchRun
		limit int
	}{{"page=100", recorded, 100}, {"page=1000", recorded, 1000}} {
		b.Run(c.name, func(b *testing.B) {
			path := filepath.Join(p.gov, journal.FileName(c.run.agentID, c.run.id))
			var tc, tw, tf time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				m := p.open(b)
				nc := benchReadEvents(b, m, c.run.id, c.limit)
				t1 := time.Now()
				nw := benchReadEvents(b, m, c.run.id, c.limit)
				t2 := time.Now()
				nf := benchSigFloor(b, path, pub, journal.SignatureContext)
				tc, tw, tf = tc+t1.Sub(t0), tw+t2.Sub(t1), tf+time.Since(t2)
				if nc != records || nw != records || nf != records {
					b.Fatalf("read %d, %d and %d events, want %d", nc, nw, nf, records)
				}
			}
			b.StopTimer()
			n := float64(b.N * records)
			b.ReportMetric(n/tc.Seconds(), "cold-events/s")
			b.ReportMetric(n/tw.Seconds(), "warm-events/s")
			b.ReportMetric(n/tf.Seconds(), "floor-events/s")
			b.ReportMetric(float64(tc.Microseconds())/float64(b.N)/1000, "cold-ms/run")
			b.ReportMetric(float64(tw.Microseconds())/float64(b.N)/1000, "warm-ms/run")
			b.ReportMetric(tw.Seconds()/tf.Seconds(), "warm/floor")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// benchListRuns is the number of finished runs of BenchmarkListRuns's project.
const benchListRuns = 10000

// benchListStatus is the status of run i of the list fixture: 80% completed, 10%
// policy_denied, 5% inference_failed, 5% cancelled.
func benchListStatus(i int) string {
	switch i % 20 {
	case 0, 10:
		return runs.StatusPolicyDenied
	case 5:
		return runs.StatusInferenceFailed
	case 15:
		return runs.StatusCancelled
	}
	return runs.StatusCompleted
}

// BenchmarkListRuns measures list_runs after a restart, cold, over a project of 10,000
// finished runs (three- and five-record journals and their ledger entries, appended in
// about the order the runs ended): per iteration, runs.Open — the index built from the ledger,
// every line verified, and the governed directory scanned — then the first page (100
// runs, each status built from its journal), the same page again (facts cached), and a
// page filtered by status=policy_denied (10% of the runs); side by side, the floor of the
// cold open — read the ledger and check each line's signature — and ledger.OpenProject,
// which a server does at start-up before runs.New (it verifies the ledger too), and a
// server's whole start-up of its run index: ledger.OpenProject, then runs.New with that
// Writer (the index starts from the lines the Writer verified) and the first page. The
// fixture is built once, by the parent benchmark, for every b.N its sub-benchmark is run
// with.
func BenchmarkListRuns(b *testing.B) {
	p := newBenchProject(b)
	t0 := time.Now()
	agents := []string{"helper", "writer", "reviewer", "planner"}
	jobs := make(chan int)
	var wg sync.WaitGroup
	var errOnce sync.Once
	var fixErr error
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				agent := agents[i%len(agents)]
				reason := benchListStatus(i)
				middle := []string{journal.TypeInferenceRequested, journal.TypeInferenceFinished, journal.TypePolicyEvaluated}
				if reason == runs.StatusInferenceFailed || reason == runs.StatusCancelled {
					middle = middle[:1]
				}
				r := benchRun{id: benchRunID(i), agent: agent, agentID: policy.AgentID(agent), reason: reason,
					start: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Millisecond), middle: middle}
				e, err := writeBenchJournal(p.gov, p.key, r)
				if err == nil {
					_, err = p.lw.Append(e)
				}
				if err != nil {
					errOnce.Do(func() { fixErr = err })
				}
			}
		}()
	}
	for i := range benchListRuns {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if fixErr != nil {
		b.Fatal(fixErr)
	}
	// The fixture's files are written back now rather than during the measurement.
	syscall.Sync()
	b.Logf("fixture: %d runs in %v", benchListRuns, time.Since(t0).Round(time.Millisecond))
	pub := p.key.Public().(ed25519.PublicKey)
	ledgerPath := filepath.Join(p.dir, ".symbiont", ledger.FileName)

	b.Run("runs=10000", func(b *testing.B) {
		var to, tp, tw, tq, tf, tl, ts time.Duration
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			m := p.open(b)
			t1 := time.Now()
			page, err := m.List(runs.Filter{Limit: 100})
			if err != nil || len(page.Runs) != 100 || page.NextCursor == "" || page.Runs[0].RunID != benchRunID(benchListRuns-1) {
				b.Fatalf("first page: %v", err)
			}
			t2 := time.Now()
			if _, err := m.List(runs.Filter{Limit: 100}); err != nil {
				b.Fatal(err)
			}
			t3 := time.Now()
			denied, err := m.List(runs.Filter{Status: runs.StatusPolicyDenied, Limit: 100})
			if err != nil || len(denied.Runs) != 100 || denied.Runs[99].Status != runs.StatusPolicyDenied {
				b.Fatalf("filtered page: %v", err)
			}
			t4 := time.Now()
			if n := benchSigFloor(b, ledgerPath, pub, ledger.Context); n != benchListRuns {
				b.Fatalf("the ledger has %d lines, want %d", n, benchListRuns)
			}
			t5 := time.Now()
			lw, recovered, err := ledger.OpenProject(p.root, "")
			if err != nil || len(recovered) != 0 {
				b.Fatalf("ledger.OpenProject: %v (%d recovered)", err, len(recovered))
			}
			lw.Close()
			t6 := time.Now()
			// A server's start-up: the ledger opened (verified) and reconciled, the index
			// started from what it verified, and the first page.
			lw, _, err = ledger.OpenProject(p.root, "")
			if err != nil {
				b.Fatal(err)
			}
			sm := runs.New(runs.Config{Root: p.root, Ledger: lw})
			if page, err := sm.List(runs.Filter{Limit: 100}); err != nil || len(page.Runs) != 100 {
				b.Fatalf("server's first page: %v", err)
			}
			t7 := time.Now()
			lw.Close()
			to, tp, tw, tq, tf, tl = to+t1.Sub(t0), tp+t2.Sub(t1), tw+t3.Sub(t2), tq+t4.Sub(t3), tf+t5.Sub(t4), tl+t6.Sub(t5)
			ts += t7.Sub(t6)
		}
		b.StopTimer()
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) / 1000 }
		b.ReportMetric(ms(to), "open-ms")
		b.ReportMetric(ms(tp), "first-page-ms")
		b.ReportMetric(ms(tw), "warm-page-ms")
		b.ReportMetric(ms(tq), "denied-page-ms")
		b.ReportMetric(ms(tf), "floor-ms")
		b.ReportMetric(ms(tl), "ledger-open-ms")
		b.ReportMetric(ms(ts), "server-start-ms")
		b.ReportMetric(to.Seconds()/tf.Seconds(), "open/floor")
		b.ReportMetric(ts.Seconds()/tf.Seconds(), "server-start/floor")
		b.ReportMetric(0, "ns/op")
	})
}
