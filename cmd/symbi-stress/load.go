package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"symbi/internal/loopback"
)

// runLoad sends sizes.loadN invocations at concurrency sizes.loadConc through one server
// against a zero-latency model. Every call must release its own answer, every journal must
// verify complete with its client's receipt, and the project must hold exactly one journal
// per call: none lost, none unterminated. It reports throughput and p50/p99 latency.
func runLoad(ctx context.Context, h *harnessRun, r *result) {
	dir, err := h.newProject("load")
	if err != nil {
		r.failf("project: %v", err)
		return
	}
	model, err := startModel(loopback.WithResponder(func(req loopback.Request) loopback.Reply {
		return loopback.Reply{Text: "echo: " + req.Prompt}
	}))
	if err != nil {
		r.failf("model: %v", err)
		return
	}
	defer model.Close()
	p, err := h.startProc(h.bin, dir, modelEnv(model.URL()), procOptions{})
	if err != nil {
		r.failf("start: %v", err)
		return
	}
	cs, err := p.connect(ctx)
	if err != nil {
		p.kill()
		r.failf("%v", err)
		return
	}
	// Warm up: the first run creates the signing key.
	if o := invoke(ctx, cs, "helper", "warm-up"); !o.released() {
		r.failf("warm-up: %s", o)
	}

	n, conc := h.sizes.loadN, h.sizes.loadConc
	outs := make([]outcome, n)
	jobs := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				callCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				outs[i] = invoke(callCtx, cs, "helper", fmt.Sprint("load-", i))
				cancel()
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	peak := p.peakRSS()
	if !p.stop(cs) {
		r.failf("the server did not exit when its input closed")
	} else if st := p.exitStatus(); st != "exit 0" {
		r.failf("the server %s when its input closed, not exit 0", st)
	}

	var lat []time.Duration
	failed := 0
	paths := map[string]bool{}
	for i, o := range outs {
		lat = append(lat, o.elapsed)
		err := checkReleased(o)
		if err == nil && o.text != fmt.Sprint("echo: load-", i) {
			err = fmt.Errorf("call %d received %q, the answer to another prompt", i, clip(o.text, 60))
		}
		if !o.released() {
			err = fmt.Errorf("call %d: %s", i, o)
		}
		if err != nil {
			failed++
			if failed <= 10 {
				r.failf("%v", err)
			}
			continue
		}
		paths[filepath.Clean(o.audit.Path)] = true
	}
	if failed > 10 {
		r.failf("… %d of %d calls failed in all", failed, n)
	}
	c, err := takeCensus(dir)
	if err != nil {
		r.failf("census: %v", err)
		return
	}
	for _, inv := range c.invalid {
		r.failf("invalid journal: %s", inv)
	}
	if c.incomplete > 0 {
		r.failf("%d unterminated journals", c.incomplete)
	}
	if c.total != n+1 || len(paths) != n {
		r.failf("%d journals and %d distinct receipts for %d calls (+1 warm-up): lost or extra journals", c.total, len(paths), n)
	}
	if got := len(model.Requests()); got != n+1 {
		r.failf("the model received %d requests for %d calls (+1 warm-up)", got, n)
	}
	r.figure("calls", n)
	r.figure("concurrency", conc)
	r.figure("journals", c.total)
	r.figure("throughput", fmt.Sprintf("%.0f/s", float64(n)/elapsed.Seconds()))
	r.figure("p50", percentile(lat, 50).Round(100*time.Microsecond))
	r.figure("p99", percentile(lat, 99).Round(100*time.Microsecond))
	r.figure("peak_rss", mib(peak))
}
