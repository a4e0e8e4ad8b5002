package runs

import (
	"encoding/base64"

	"symbi/internal/errcode"
	"symbi/internal/policy"
)

// cursorPrefix versions list cursors, which callers treat as opaque.
const cursorPrefix = "r1:"

// List returns runs newest first (by run id, a UUIDv7), filtered, one page at a time.
func (m *Manager) List(f Filter) (*Page, error) {
	switch {
	case f.Limit == 0:
		f.Limit = DefaultLimit
	case f.Limit < 1 || f.Limit > MaxLimit:
		return nil, errcode.Errorf(errcode.InvalidRequest, "limit is %d; it must be 1..%d", f.Limit, MaxLimit)
	}
	if f.Status != "" && !contains(Statuses, f.Status) {
		return nil, errcode.Errorf(errcode.InvalidRequest, "status %s: want one of %v", errcode.Quote(f.Status), Statuses)
	}
	if f.Resolution != "" && f.Resolution != Unresolved && !contains(Resolutions, f.Resolution) {
		return nil, errcode.Errorf(errcode.InvalidRequest, "resolution %s: want one of %v or %q", errcode.Quote(f.Resolution), Resolutions, Unresolved)
	}
	after := ""
	if f.After != "" {
		// Strict, and the cursor must be the one issued: a decoder skips \r and \n.
		raw, err := base64.RawURLEncoding.Strict().DecodeString(f.After)
		if err != nil || base64.RawURLEncoding.EncodeToString(raw) != f.After || len(raw) <= len(cursorPrefix) || string(raw[:len(cursorPrefix)]) != cursorPrefix || !validID(string(raw[len(cursorPrefix):])) {
			return nil, errcode.Errorf(errcode.InvalidRequest, "after %s is not a list_runs cursor (pass next_cursor back unchanged)", errcode.Quote(f.After))
		}
		after = string(raw[len(cursorPrefix):])
	}
	agentIDs := map[string]bool{}
	if f.Agent != "" && m.cfg.Registry != nil {
		// A refused definition still names its agent: its earlier runs are found by the
		// file's name too (and a delegated agent read without the executors file).
		if a, _ := m.cfg.Registry.Resolve(f.Agent); a != nil && a.Admission != nil && a.Admission.Agent != "" {
			agentIDs[policy.AgentID(a.Admission.Agent)] = true
		}
	}

	m.mu.Lock()
	err := m.ledgerTail()
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	page := &Page{Runs: []Status{}}
	for more := true; more; {
		// A batch of candidates passing the filters decidable from the index, copied under
		// the lock; their journals are read outside it. The walk resumes below the last
		// id taken, so runs entering the index meanwhile cannot shift it.
		var batch []run
		m.mu.Lock()
		pos := len(m.order)
		if after != "" {
			pos = searchBelow(m.order, after)
		}
		for ; pos > 0 && len(batch) <= f.Limit; pos-- {
			after = m.order[pos-1]
			if r := m.runs[after]; cheapMatch(r, f, agentIDs) {
				batch = append(batch, *r)
			}
		}
		more = pos > 0
		m.mu.Unlock()
		for k := range batch {
			st := m.build(&batch[k], false)
			if f.Status != "" && st.Status != f.Status || f.Agent != "" && st.Agent != f.Agent && st.AgentID != f.Agent && !agentIDs[st.AgentID] {
				continue
			}
			if f.Reader != nil && !m.mayRead(*f.Reader, st).Allow {
				continue
			}
			if len(page.Runs) == f.Limit {
				page.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(cursorPrefix + page.Runs[len(page.Runs)-1].RunID))
				return page, nil
			}
			page.Runs = append(page.Runs, *st)
		}
	}
	return page, nil
}

// cheapMatch applies the filters the index can decide without reading a journal; a run
// it passes may still be filtered out once its status is built.
func cheapMatch(r *run, f Filter, agentIDs map[string]bool) bool {
	if f.Resolution != "" {
		if f.Resolution == Unresolved && r.resolution != nil ||
			f.Resolution != Unresolved && (r.resolution == nil || r.resolution.Value != f.Resolution) {
			return false
		}
	}
	if f.Agent != "" && r.agent != "" && r.agent != f.Agent && r.agentID != f.Agent && !agentIDs[r.agentID] {
		return false
	}
	// A finished run's status is its ledger reason, except that a run whose journal never
	// got the terminated record its ledger entry names is audit_failed, and one whose
	// writer, another server's, is writing that record still is running (build): only its
	// journal tells, so neither is ruled out here.
	if f.Status != "" && f.Status != StatusAuditFailed && f.Status != StatusRunning && r.ended && r.reason != "" && r.live == nil && r.reason != f.Status {
		return false
	}
	return true
}

// searchBelow returns the number of ids in the ascending order that sort before id.
func searchBelow(order []string, id string) int {
	lo, hi := 0, len(order)
	for lo < hi {
		mid := (lo + hi) / 2
		if order[mid] < id {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}
