package runs

import (
	"context"
	"fmt"
	"time"

	"symbi/internal/errcode"
	"symbi/internal/invoke"
	"symbi/internal/journal"
)

// testAfterRead, when a test sets it, runs in build between the reading of a journal and
// the reading of its facts.
var testAfterRead func()

// testBeforeBuild, when a test sets it, runs in build before anything else: after the
// snapshot of the run was taken.
var testBeforeBuild func()

// abandonedReason explains the abandoned status.
const abandonedReason = "the journal has no terminated record and no server is writing it: the server stopped before the run ended, or the journal failed before its end could be written"

// build makes the Status of snap, reading (and, for a finished run, caching) its
// journal's facts. withText adds the released text.
func (m *Manager) build(snap *run, withText bool) *Status { return m.buildOnce(snap, withText, false) }

// buildOnce is build; again says the ledger was read on already for this answer.
func (m *Manager) buildOnce(snap *run, withText, again bool) *Status {
	if testBeforeBuild != nil && !again {
		testBeforeBuild()
	}
	st := &Status{RunID: snap.id, Agent: snap.agent, AgentID: snap.agentID, Caller: snap.caller, CallerAuth: snap.callerAuth,
		Records: snap.records, Head: snap.head, Resolution: snap.resolution, Journal: m.journalPath(snap), JournalPruned: snap.pruned}
	lr := snap.live
	running := false
	var bound int64 = -1
	switch {
	case lr != nil && !isDone(lr):
		running = true
		rc := lr.Durable()
		st.Records, st.Head, bound = int64(rc.Records), rc.Head, int64(rc.Records)
	case lr != nil: // ended; its watcher has not yet recorded it
		rc := lr.Durable()
		snap.ended, snap.reason = true, lr.Reason()
		snap.released = snap.reason == StatusCompleted
		st.Records, st.Head = int64(rc.Records), rc.Head
	case snap.external:
		if running = journal.InProgress(st.Journal); !running && !again {
			// No writer holds it: its run has ended, or its server stopped — and a run's
			// ledger entry is durable before its writer lets go. The ledger is read on
			// (lookup read it before that, perhaps before the entry): a run it records
			// now is built from what it records.
			if snap2, err := m.lookup(snap.id); err == nil && !snap2.external {
				return m.buildOnce(snap2, withText, true)
			}
		}
	}
	f := snap.facts
	if f != nil && !f.current(st.Journal) {
		f = nil // the file changed since its facts were read: read it again
	}
	var data []byte
	held := false // a writer held the journal before it was read
	if f == nil && !snap.pruned {
		if lr == nil && snap.ended {
			// Another process's run the ledger recorded: its entry is durable just before
			// its journal's terminated record, and its writer holds the journal until
			// then. Whether it does is decided before the journal is read: a journal not
			// held then is read whole, and one held may end while it is read.
			held = journal.InProgress(st.Journal)
		}
		// The facts are of the bytes read: their size is those bytes', the inode the file's
		// before they were read — a line appended while they are verified makes them not
		// current, and they are read again.
		_, ino := fileID(st.Journal)
		var err error
		if data, err = m.readJournal(snap); err != nil {
			f = &facts{problem: err}
		} else {
			if testAfterRead != nil {
				testAfterRead()
			}
			f = readFacts(data, snap.id, snap.agentID, bound, m.pub)
			f.size, f.ino = int64(len(data)), ino
			// A journal changes no more once its run has ended: a finished run's facts,
			// and those of a journal another process has terminated, are kept. So are
			// those of another process's run in flight, until its file changes (current):
			// run_events pages through it without reading it whole at every page.
			if lr == nil && (!running && (snap.ended || snap.external && f.terminated) || running && snap.external) {
				if f.problem == nil && !snap.external {
					f.problem = receiptProblem(f, snap)
				}
				m.mu.Lock()
				if r := m.runs[snap.id]; r != nil {
					r.facts = f
				}
				m.mu.Unlock()
			}
		}
	}
	if f == nil {
		f = &facts{}
	}
	if lr == nil && snap.ended && !f.terminated && f.problem == nil && !snap.pruned && (held || journal.InProgress(st.Journal)) {
		// Another process's run is ending: its ledger entry is made durable just before
		// its journal's terminated record, and its writer still holds the journal. It is
		// running until that record is written or its writer lets go without it.
		running = true
	}
	if st.Agent == "" {
		st.Agent = f.agent
	}
	if st.Caller == "" {
		st.Caller, st.CallerAuth = f.caller, f.callerAuth
	}
	if st.Caller == "" {
		// Runs recorded before callers were: only stdio servers existed then.
		st.Caller = invoke.CallerStdio
	}
	st.StartedAt, st.EndedAt = f.startedAt, f.endedAt
	if f.problem != nil {
		st.JournalProblem = f.problem.Error()
	}
	// Released only when the journal itself, verified and whole, ends with a terminated
	// record saying so: a ledger entry is written before that record, and a run whose
	// record never became durable released nothing.
	released := f.terminated && f.released && f.problem == nil
	st.Approval = f.approval
	switch {
	case running && f.approval != nil && f.waiting:
		st.Status = StatusAwaitingApproval
	case running:
		st.Status = StatusRunning
	case snap.pruned && snap.prunedShort:
		// Pruned as it was: one line short of its run entry, the end never written.
		st.Status = StatusAuditFailed
		st.JournalProblem = "the ledger recorded this run as " + snap.reason + ", but its journal, pruned since, had no terminated record: the end was never written, and nothing was released"
	case snap.pruned && snap.reason == "" && snap.prunedReason != "":
		// Recorded as found, then pruned: the prune recorded how its journal ended.
		st.Status, st.Released = snap.prunedReason, snap.prunedReleased
	case snap.ended && snap.reason != "" && !f.terminated && f.problem == nil && !snap.pruned:
		// The ledger recorded the run's end, but its journal has no terminated record: the
		// end was never written (a failed write, or a crash just after the ledger entry).
		st.Status = StatusAuditFailed
		st.JournalProblem = "the ledger recorded this run as " + snap.reason + ", but its journal has no terminated record: the end was never written, and nothing was released"
		st.unended = true
	case snap.ended && snap.reason != "":
		st.Status, st.Released = snap.reason, released || snap.pruned && snap.released
	case f.terminated: // a recovered entry, or a journal the ledger does not know
		st.Status, st.Released = f.reason, released
	default:
		st.Status = StatusAbandoned
		// A run held at a gate when its server stopped is resumed by the next server to
		// start on the project (invoke.ReopenHeld): its journal is not at its end.
		st.resumable = snap.external && snap.resolution == nil && f.problem == nil && f.heldAtEnd && f.textRetained
	}
	if snap.external && f.terminated && !running && st.JournalProblem == "" {
		// The ledger entry of a run is written before its terminated record: a finished
		// journal the ledger does not know was placed here, or its entry was lost.
		st.JournalProblem = "the project ledger has no entry for this finished run (a journal placed in the directory, or a lost ledger entry); its text is not served"
		st.Released = false
	}
	if st.Approval != nil && st.Approval.Title != "" && !st.Released {
		// A title is text the agent chose: withheld, as run_events withholds its line,
		// until the run released its text (an approver of the waiting request sees it).
		a := *st.Approval
		st.heldTitle, a.Title = a.Title, ""
		st.Approval = &a
	}
	if snap.external {
		st.Records, st.Head = f.records, f.head
	}
	if st.EndedAt == "" && !running {
		st.EndedAt = snap.endedAt
	}
	switch st.Status {
	case StatusRunning, StatusCompleted, StatusAwaitingApproval:
	case StatusAbandoned:
		st.Reason = abandonedReason
	default:
		st.Reason = f.errText
	}
	if st.Released && released { // said of a journal read, not of a pruned one
		retained := f.textRetained
		st.TextRetained = &retained
		if withText && retained {
			var err error
			if data == nil {
				data, err = m.readJournal(snap)
			}
			var text string
			var ok bool
			if err == nil {
				text, ok, err = releasedText(data, snap.id, snap.agentID, m.pub)
			}
			if err == nil && ok {
				st.Text = &text
			} else if err != nil {
				st.JournalProblem = err.Error()
			}
		}
	}
	return st
}

// Events returns the run's events after cursor after (at most limit). With wait > 0 and
// none to return yet, it waits until one is durable, the run ends, wait passes or ctx
// ends (a long poll; the run's journal writer wakes it).
func (m *Manager) Events(ctx context.Context, runID string, after int64, limit int, wait time.Duration) (*Events, error) {
	switch {
	case after < 0:
		return nil, errcode.Errorf(errcode.InvalidRequest, "after is %d; a cursor is 0 or more", after)
	case limit == 0:
		limit = DefaultLimit
	case limit < 1 || limit > MaxLimit:
		return nil, errcode.Errorf(errcode.InvalidRequest, "limit is %d; it must be 1..%d", limit, MaxLimit)
	}
	if wait < 0 || wait > MaxWait {
		return nil, errcode.Errorf(errcode.InvalidRequest, "wait_ms is %d; it must be 0..%d", wait.Milliseconds(), MaxWait.Milliseconds())
	}
	var timer <-chan time.Time
	if wait > 0 && m.waiters.Add(1) > MaxWaiters {
		m.waiters.Add(-1)
		wait = 0 // too many waiting already: answer at once
	} else if wait > 0 {
		defer m.waiters.Add(-1)
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	var poll *time.Ticker // another process's run: its journal is looked at, not waited on
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	for {
		snap, err := m.lookup(runID)
		if err != nil {
			return nil, err
		}
		var changed, done <-chan struct{}
		if lr := snap.live; lr != nil {
			changed, done = lr.Changed(), lr.Done() // taken before reading: no event is missed
		}
		// Another process's run is looked at, for a call that waits: its journal's identity
		// and whether its writer holds it, taken before reading, as changed is.
		var path string
		var size, ino int64
		var held bool
		if changed == nil && timer != nil {
			path = m.journalPath(snap)
			size, ino = fileID(path)
			held = journal.InProgress(path)
		}
		evs, err := m.events(snap, after, limit)
		if err != nil || len(evs.Events) > 0 || evs.Done || timer == nil {
			return evs, err
		}
		if changed == nil {
			// Another process writes the run (or none does yet): no writer here to wake
			// this call, so its journal is looked at every ExternalPoll until it changes
			// or its writer lets go of it (that process stopped: the run has ended).
			if poll == nil {
				poll = time.NewTicker(ExternalPoll)
				if testExternalWait != nil {
					testExternalWait()
				}
			}
			for now, now2 := fileID(path); now == size && now2 == ino && journal.InProgress(path) == held; now, now2 = fileID(path) {
				select {
				case <-poll.C:
				case <-timer:
					return evs, nil
				case <-ctx.Done():
					return evs, nil
				}
			}
			continue
		}
		select {
		case <-changed:
		case <-done:
		case <-timer:
			return evs, nil
		case <-ctx.Done():
			return evs, nil
		}
	}
}

// testExternalWait, when a test sets it, is called once a long poll of another process's
// run begins to look at its journal.
var testExternalWait func()

// ExternalPoll is how often a long poll of another process's run looks at its journal.
const ExternalPoll = 50 * time.Millisecond

// events reads one page of snap's events.
func (m *Manager) events(snap *run, after int64, limit int) (*Events, error) {
	// This process's run in flight is read page after page: its status needs no journal
	// facts (whose reading would verify the whole journal again at every page). Another
	// process's run is judged from its journal's facts, as run_status judges it (running,
	// or awaiting_approval while a held request waits); a finished run's facts are read
	// once and kept.
	var st *Status
	switch lr := snap.live; {
	case lr != nil && !isDone(lr):
		rc, awaiting := lr.Awaiting() // read together: the records include the wait's
		st = &Status{Status: StatusRunning, Records: int64(rc.Records)}
		if awaiting {
			st.Status = StatusAwaitingApproval
		}
	default:
		st = m.build(snap, false)
	}
	if snap.pruned {
		return nil, errcode.Errorf(errcode.NotFound, "run %s: its journal was pruned (symbi audit prune); the ledger keeps its entry", snap.id)
	}
	data, err := m.readJournal(snap)
	if err != nil {
		return nil, err
	}
	var bound int64 = -1
	if (st.Status == StatusRunning || st.Status == StatusAwaitingApproval) && snap.live != nil {
		bound = st.Records // only what is durable
	}
	to := after + int64(limit)
	if bound >= 0 && bound < to {
		to = bound // only what is durable
	}
	lines, done, err := read(data, snap.id, snap.agentID, after, to, m.pub, snap.verified)
	if done != nil {
		m.mu.Lock()
		if r := m.runs[snap.id]; r != nil {
			r.verified = done // the next page need not verify these lines again
		}
		m.mu.Unlock()
	}
	if err != nil && len(lines) == 0 {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "run %s: %v; nothing after it is served", snap.id, err)
	}
	all := countLines(data, bound)
	if after > all {
		return nil, errcode.Errorf(errcode.InvalidRequest, "after is %d, but run %s has %d events so far", after, snap.id, all)
	}
	out := &Events{Events: make([]Event, 0, len(lines)), NextCursor: after + int64(len(lines)), Status: st.Status}
	released := st.Status == StatusCompleted && st.Released
	for _, l := range lines {
		ev := Event{Seq: l.seq, Type: l.typ, Time: l.time, Line: string(l.raw)}
		if !released && carriesOutput(l) {
			ev.Line, ev.LineSHA256 = "", l.hash
			// The same words whenever the event is read (the page has the status): a client
			// comparing pages read while the run went on and after it ended sees one event.
			ev.Withheld = "this record carries the run's output, or its digest, and the run has not released it: withheld until the policy gate releases it"
		}
		out.Events = append(out.Events, ev)
	}
	ended := st.Status != StatusRunning && st.Status != StatusAwaitingApproval
	problem := st.JournalProblem != "" && !st.unended // a journal that verifies but never ended is whole
	if ended && len(lines) == 0 && err == nil && problem {
		// Every line verifies, but the journal is not what the ledger recorded of the run.
		return nil, errcode.Errorf(errcode.AuditUnavailable, "run %s: %s; nothing after it is served", snap.id, st.JournalProblem)
	}
	out.Done = ended && out.NextCursor >= all && err == nil && !problem && !st.resumable
	return out, nil
}

// receiptProblem compares the journal of an ended run with the receipt the index holds
// of it (its ledger entry's, or this process's writer's): a journal cut short at a line
// boundary, or replaced, verifies line by line and is caught only here. The journal may
// lack only its last line, ending at the run entry's prev_head: the server stopped after
// the run's ledger entry was durable and before that line, and the ledger holds the
// outcome.
func receiptProblem(f *facts, r *run) error {
	switch {
	case f.records == r.records && f.head == r.head:
	case r.prevHead != "" && f.records == r.records-1 && f.head == r.prevHead:
	default:
		return fmt.Errorf("the journal has %d records with head %q; the ledger recorded %d with head %q: truncated or replaced", f.records, f.head, r.records, r.head)
	}
	return nil
}

// countLines counts the complete lines of data, at most bound (bound < 0: all).
func countLines(data []byte, bound int64) int64 {
	var n int64
	for _, c := range data {
		if c == '\n' {
			n++
			if n == bound {
				break
			}
		}
	}
	return n
}
