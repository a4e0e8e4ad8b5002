package runs_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"symbi/internal/errcode"
	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/policy"
	"symbi/internal/runs"
)

// The fuzz targets run in several processes; their seeds must verify in each, so the
// fixtures use a fixed key and journals sealed with fixed times.
var fuzzKeySeed = bytes.Repeat([]byte{0x5e}, ed25519.SeedSize)

// The run ids of FuzzEvents: one the ledger records, one it does not know.
const (
	fuzzRecorded   = "01900000-0000-7000-8000-00000000000a"
	fuzzUnrecorded = "01900000-0000-7000-8000-00000000000b"
	fuzzOther      = "01900000-0000-7000-8000-00000000000c"
)

// sealJournal returns the journal the writer would write for recs, at fixed times.
func sealJournal(t testing.TB, key ed25519.PrivateKey, agent, runID string, recs []journal.Record) []byte {
	t.Helper()
	type payload struct {
		V       int            `json:"v"`
		RunID   string         `json:"run_id"`
		Seq     int            `json:"seq"`
		Prev    string         `json:"prev"`
		Time    string         `json:"time"`
		AgentID string         `json:"agent_id"`
		Type    string         `json:"type"`
		Data    journal.Record `json:"data"`
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	prev := journal.ZeroHash
	var out []byte
	for seq, r := range recs {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(payload{V: 1, RunID: runID, Seq: seq, Prev: prev, Time: t0.Add(time.Duration(seq) * 7 * time.Millisecond).Format("2006-01-02T15:04:05.000Z"),
			AgentID: policy.AgentID(agent), Type: r.Type(), Data: r}); err != nil {
			t.Fatal(err)
		}
		line := journal.Seal(key, journal.SignatureContext, bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
		out = append(out, line...)
		prev = hashLine(line)
	}
	return out
}

// FuzzEvents: whatever bytes a run's journal holds, Status and Events never panic, every
// event served is the journal's line at its seq and verifies with the project's key,
// chained from the first line, and a run is "done" only when every line was served.
func FuzzEvents(f *testing.F) {
	p := newTestProject(f, fuzzKeySeed)
	key := p.store.SigningKey()
	// Small records: the fuzzer cannot forge a signature, so the seeds need only be valid,
	// and short lines keep its minimization of interesting inputs quick.
	small := func(reason string) []journal.Record {
		recs := []journal.Record{journal.Started{Agent: "alpha"}, journal.InferenceRequested{CallID: "c"}}
		switch reason {
		case runs.StatusCompleted:
			recs = append(recs, journal.InferenceFinished{CallID: "c", Outcome: "completed", TextSHA256: "h", Text: "ok"},
				journal.PolicyEvaluated{Decision: "allow", TextSHA256: "h"})
		case runs.StatusPolicyDenied:
			recs = append(recs, journal.InferenceFinished{CallID: "c", Outcome: "completed", TextSHA256: "h"},
				journal.PolicyEvaluated{Decision: "deny", TextSHA256: "h"})
		}
		return append(recs, journal.Terminated{Reason: reason, Released: reason == runs.StatusCompleted})
	}
	valid := sealJournal(f, key, "alpha", fuzzRecorded, small(runs.StatusCompleted))
	if rep := journal.Verify(writeTemp(f, "alpha", fuzzRecorded, valid), p.pub, journal.VerifyOptions{RunID: fuzzRecorded}); !rep.Complete {
		f.Fatalf("the sealed seed journal does not verify: %+v", rep.Problems)
	}
	ls := completeLines(valid)
	if _, err := p.lw.Append(ledger.Run{RunID: fuzzRecorded, AgentID: policy.AgentID("alpha"), Agent: "alpha",
		File: journal.FileName(policy.AgentID("alpha"), fuzzRecorded), Reason: runs.StatusCompleted, Released: true,
		Records: int64(len(ls)), Head: hashLine(ls[len(ls)-1]), PrevHead: hashLine(ls[len(ls)-2]), Caller: "stdio"}); err != nil {
		f.Fatal(err)
	}
	paths := map[string]string{fuzzRecorded: p.journalPath("alpha", fuzzRecorded), fuzzUnrecorded: p.journalPath("alpha", fuzzUnrecorded)}

	other := completeLines(sealJournal(f, key, "alpha", fuzzOther, small(runs.StatusCancelled)))
	unrecorded := sealJournal(f, key, "alpha", fuzzUnrecorded, small(runs.StatusPolicyDenied))
	join := func(ls ...[]byte) []byte { return bytes.Join(ls, nil) }
	for _, seed := range [][]byte{
		valid,
		unrecorded,
		valid[:len(valid)-1],                    // torn: the last newline
		valid[:len(valid)-20],                   // torn inside the last line
		join(ls[0], ls[1], ls[2]),               // truncated
		join(ls[0], ls[2], ls[1], ls[3], ls[4]), // reordered
		join(ls[0], ls[1], ls[3], ls[4]),        // a line deleted
		join(ls[0], other[1], ls[2], ls[3], ls[4]),
		join(ls[0], flipByte(ls[1], 30), ls[2], ls[3], ls[4]),
		join(ls[0], ls[1], ls[2], ls[3], ls[4], ls[4]),
		join(ls[0], ls[1], []byte("{}\n"), ls[3]),
		{},
		[]byte("\n\n\n"),
		[]byte(`{"payload":{},"signature":""}` + "\n"),
	} {
		f.Add(seed)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		for _, path := range paths {
			writeFile(t, path, data)
		}
		m, err := runs.Open(runs.Config{Root: p.root})
		if err != nil {
			t.Fatal(err)
		}
		lines := completeLines(data)
		all := int64(len(lines))
		for id := range paths {
			ok := verifiedPrefix(lines, id, p.pub) // lines 0..ok-1 verify and chain as id's
			st, err := m.Status(id)
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			if st.JournalProblem == "" && ok != all {
				t.Fatalf("%s: no journal_problem, but only %d of %d lines verify", id, ok, all)
			}
			if st.Text != nil && !bytes.Contains(data, []byte(*st.Text)) {
				t.Fatalf("%s: the text %q is not in the journal", id, *st.Text)
			}
			// The whole run at once, then pages of 1 from every cursor up to a few lines,
			// the end, and beyond it.
			cursors := []int64{0}
			for c := int64(1); c < min(all, 6); c++ {
				cursors = append(cursors, c)
			}
			cursors = append(cursors, all, all+1)
			for i, after := range cursors {
				limit := 1
				if i == 0 {
					limit = runs.MaxLimit
				}
				evs, err := events(t, m, id, after, limit)
				if err != nil {
					if c := errcode.Of(err); c != errcode.AuditUnavailable && !(c == errcode.InvalidRequest && after > all) {
						t.Fatalf("%s after %d limit %d: %v (%s)", id, after, limit, err, c)
					}
					continue
				}
				if after > all {
					t.Fatalf("%s: after %d beyond the %d lines served %+v", id, after, all, evs)
				}
				if int64(len(evs.Events)) > int64(limit) || evs.NextCursor != after+int64(len(evs.Events)) {
					t.Fatalf("%s after %d limit %d: %d events, next %d", id, after, limit, len(evs.Events), evs.NextCursor)
				}
				for k, ev := range evs.Events {
					if ev.Seq != after+int64(k) || ev.Seq >= ok || !servedAs(ev, lines[ev.Seq]) {
						t.Fatalf("%s after %d: served event %d (seq %d), but only lines 1..%d verify, or it is not the journal's line: %q", id, after, k, ev.Seq, ok, ev.Line)
					}
				}
				if evs.Done && (evs.NextCursor != all || ok != all || evs.Status == runs.StatusRunning) {
					t.Fatalf("%s after %d limit %d: done at %d of %d lines (%d verify), status %s", id, after, limit, evs.NextCursor, all, ok, evs.Status)
				}
			}
		}
	})
}

// verifiedPrefix returns how many of the journal's first lines verify with pub and chain
// as runID's lines (checkChain's checks), each line checked once.
func verifiedPrefix(lines [][]byte, runID string, pub ed25519.PublicKey) int64 {
	n := 0
	for n < len(lines) && checkLink(lines, n, runID, pub) == nil {
		n++
	}
	return int64(n)
}

// writeTemp writes a journal under its writer's name in a temporary directory.
func writeTemp(t testing.TB, agent, runID string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), journal.FileName(policy.AgentID(agent), runID))
	writeFile(t, path, data)
	return path
}

// runIDForm is a run id as list_runs cursors carry them.
var runIDForm = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// FuzzListCursor: whatever after and limit a caller passes, List never panics, and either
// refuses them as invalid_request or returns the page of runs below the cursor, newest
// first, with a next cursor exactly when more follow.
func FuzzListCursor(f *testing.F) {
	p := newTestProject(f, fuzzKeySeed)
	var ids []string // newest first
	for i := range 30 {
		id := fmt.Sprintf("01900000-0000-7000-8000-%012d", i)
		p.runWithID(f, []string{"alpha", "beta"}[i%2], id, runs.StatusCancelled)
		ids = append(ids, id)
	}
	slices.Reverse(ids)
	m := p.open(f)
	cursor := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

	f.Add("", 0)
	f.Add("", 7)
	f.Add("", runs.MaxLimit)
	f.Add("", runs.MaxLimit+1)
	f.Add("", -1)
	for _, limit := range []int{1, 7} {
		page, err := m.List(runs.Filter{Limit: limit})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(page.NextCursor, limit)
	}
	for _, s := range []string{"r1:" + ids[4], "r1:" + ids[29], "r1:0", "r1:z", "r1:", "r2:" + ids[4], "r1:../x", "r1:ü", "r1:" + strings.Repeat("a", 129)} {
		f.Add(cursor(s), 3)
	}
	f.Add(base64.URLEncoding.EncodeToString([]byte("r1:run-1")), 3)
	f.Add(cursor("r1:"+ids[4])+"\n", 3)
	f.Add("!!!", 3)
	f.Add(ids[4], 3)

	f.Fuzz(func(t *testing.T, after string, limit int) {
		page, err := m.List(runs.Filter{After: after, Limit: limit})

		// What list_runs's documented contract makes of the arguments.
		below, ok := "", limit >= 0 && limit <= runs.MaxLimit
		if after != "" {
			// Exactly a cursor the server issues: no \r or \n skipped, no stray bits.
			raw, derr := base64.RawURLEncoding.Strict().DecodeString(after)
			id, prefixed := strings.CutPrefix(string(raw), "r1:")
			ok = ok && derr == nil && base64.RawURLEncoding.EncodeToString(raw) == after && prefixed && runIDForm.MatchString(id)
			below = id
		}
		if !ok {
			if err == nil {
				t.Fatalf("after %q limit %d: listed %d runs, want invalid_request", after, limit, len(page.Runs))
			}
			if c := errcode.Of(err); c != errcode.InvalidRequest {
				t.Fatalf("after %q limit %d: %v (%s), want invalid_request", after, limit, err, c)
			}
			return
		}
		if err != nil {
			t.Fatalf("after %q limit %d: %v", after, limit, err)
		}
		if limit == 0 {
			limit = runs.DefaultLimit
		}
		first := 0
		if below != "" {
			first = len(ids) - len(slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id >= below }))
		}
		want := ids[first:min(first+limit, len(ids))]
		if got := statusIDs(page.Runs); !slices.Equal(got, want) {
			t.Fatalf("after %q limit %d: got %v, want %v", after, limit, got, want)
		}
		more := first+limit < len(ids)
		if (page.NextCursor != "") != more {
			t.Fatalf("after %q limit %d: next cursor %q, want one: %v", after, limit, page.NextCursor, more)
		}
		if more && page.NextCursor != cursor("r1:"+want[len(want)-1]) {
			t.Fatalf("next cursor %q does not resume after %s", page.NextCursor, want[len(want)-1])
		}
	})
}
