package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"symbi/internal/ledger"
	"symbi/internal/loopback"
)

// findings lists the runs whose ledger entry and journal disagree.
func findings(r *ledger.ProjectReport) []string {
	var out []string
	for _, f := range r.Runs {
		if f.Problem != "" && len(out) < 10 {
			out = append(out, f.File+": "+f.Problem)
		}
	}
	return out
}

// runCrash starts symbi mcp on one project again and again; each time a few clients
// invoke concurrently and the server is killed with SIGKILL at a random moment (seeded).
// After the last kill the server is restarted and must serve a run. Then every journal
// must verify complete or incomplete (never invalid), and every text a client received
// must belong to a journal that verifies complete, with the client's receipt, and ends in
// terminated with released true.
func runCrash(ctx context.Context, h *harnessRun, r *result) {
	dir, err := h.newProject("crash")
	if err != nil {
		r.failf("project: %v", err)
		return
	}
	// A short prompt-dependent delay spreads the kills over every stage of a run.
	model, err := startModel(loopback.WithResponder(func(req loopback.Request) loopback.Reply {
		f := fnv.New32a()
		f.Write([]byte(req.Prompt))
		return loopback.Reply{Text: "answer to " + req.Prompt, Delay: time.Duration(f.Sum32()%20) * time.Millisecond}
	}))
	if err != nil {
		r.failf("model: %v", err)
		return
	}
	defer model.Close()
	env := modelEnv(model.URL())

	var (
		mu       sync.Mutex
		received []outcome
		calls    int
		peak     int64
	)
	kills := 0
	for round := 0; round < h.sizes.kills && ctx.Err() == nil; round++ {
		p, err := h.startProc(h.bin, dir, env, procOptions{})
		if err != nil {
			r.failf("round %d: start: %v", round, err)
			return
		}
		cs, err := p.connect(ctx)
		if err != nil {
			p.kill()
			r.failf("round %d: %v", round, err)
			return
		}
		callCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
		var wg sync.WaitGroup
		for w := range h.sizes.crashConc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 1000; i++ { // bounded: the kill ends the loop long before
					o := invoke(callCtx, cs, "helper", fmt.Sprintf("r%d-w%d-%d", round, w, i))
					mu.Lock()
					calls++
					if o.released() {
						received = append(received, o)
					}
					mu.Unlock()
					if o.err != nil {
						return
					}
				}
			}()
		}
		wait := time.Duration(h.rng.IntN(h.sizes.killMaxMS*1000)) * time.Microsecond
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
		peak = max(peak, p.peakRSS())
		p.kill()
		kills++
		cs.Close()
		wg.Wait()
		cancel()
		p.stdin.Close()
		p.stdout.Close()
		if round%20 == 0 {
			h.logf("crash: round %d, %d calls, %d texts received", round, calls, len(received))
		}
	}

	// Restart: the project must still serve a governed run.
	p, err := h.startProc(h.bin, dir, env, procOptions{})
	if err != nil {
		r.failf("restart: %v", err)
		return
	}
	cs, err := p.connect(ctx)
	if err != nil {
		p.kill()
		r.failf("restart: %v", err)
		return
	}
	o := invoke(ctx, cs, "helper", "after the crashes")
	if !o.released() || o.text != "answer to after the crashes" {
		r.failf("after restart: invoke_agent gave %s; stderr: %s", o, p.stderr.tail())
	} else {
		received = append(received, o)
	}
	peak = max(peak, p.peakRSS())
	if !p.stop(cs) {
		r.failf("after restart: the server did not exit when its input closed")
	} else if st := p.exitStatus(); st != "exit 0" {
		r.failf("after restart: the server %s when its input closed, not exit 0", st)
	}

	c, err := takeCensus(dir)
	if err != nil {
		r.failf("census: %v", err)
		return
	}
	for _, inv := range c.invalid {
		r.failf("invalid journal (verify exit 1): %s", inv)
	}
	// The ledger, appended to by every server the kills interrupted and reconciled by
	// each restart, must be consistent with the journals: never a broken chain, a journal
	// it does not know, or an entry its journal contradicts.
	if pub, err := projectKey(dir); err != nil {
		r.failf("project key: %v", err)
	} else {
		lr := ledger.VerifyProject(dir, pub, nil)
		if lr.ExitCode() == 1 {
			r.failf("ledger and journals inconsistent after the kills: %v", append(lr.Problems, findings(lr)...))
		}
		r.figure("ledger_entries", lr.LedgerSize)
	}
	bad := 0
	for _, o := range received {
		if err := checkReleased(o); err != nil {
			bad++
			if bad <= 10 {
				r.failf("%v", err)
			}
		} else if !strings.HasPrefix(o.text, "answer to ") {
			r.failf("released text %q is not the model's answer", clip(o.text, 60))
		}
	}
	if bad > 10 {
		r.failf("… %d released texts without a complete released journal in all", bad)
	}
	r.figure("kills", kills)
	r.figure("calls", calls)
	r.figure("released", len(received))
	r.figure("journals", c.total)
	r.figure("complete", c.complete)
	r.figure("incomplete", c.incomplete)
	r.figure("invalid", len(c.invalid))
	r.figure("peak_rss", mib(peak))
	r.figure("seed", h.seed)
}
