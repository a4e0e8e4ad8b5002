package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"symbi/internal/loopback"
)

// runShutdown sends SIGTERM, SIGINT and SIGHUP, each to its own server while
// sizes.inFlight runs wait on a hanging model (the helper agent, 120 s deadline). The
// server must exit by itself, no client may receive text, and once it has exited each
// in-flight run's journal must verify complete and end in terminated with reason cancelled.
func runShutdown(ctx context.Context, h *harnessRun, r *result) {
	var peak int64
	var exits []string
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		kib, exit, err := h.shutdownCase(ctx, sig)
		peak = max(peak, kib)
		exits = append(exits, exit)
		if err != nil {
			r.failf("%s: %v", sigName(sig), err)
		}
	}
	r.figure("signals", "TERM,INT,HUP")
	r.figure("in_flight", h.sizes.inFlight)
	r.figure("exits", strings.Join(exits, ","))
	r.figure("peak_rss", mib(peak))
}

func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return sig.String()
}

// shutdownCase runs one signal; it returns the server's peak RSS and how it exited.
func (h *harnessRun) shutdownCase(ctx context.Context, sig syscall.Signal) (int64, string, error) {
	dir, err := h.newProject("shutdown-" + sigName(sig))
	if err != nil {
		return 0, "", err
	}
	n := h.sizes.inFlight
	arrived := make(chan struct{}, n)
	model, err := startModel(loopback.WithReply(loopback.Reply{Fault: loopback.FaultHang}))
	if err != nil {
		return 0, "", err
	}
	defer model.Close()
	model.OnRequest(func(loopback.Request) { arrived <- struct{}{} })
	p, err := h.startProc(h.bin, dir, modelEnv(model.URL()), procOptions{})
	if err != nil {
		return 0, "", err
	}
	cs, err := p.connect(ctx)
	if err != nil {
		p.kill()
		return 0, "", err
	}
	defer cs.Close()
	outs := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			callCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			outs[i] = invoke(callCtx, cs, "helper", fmt.Sprint("in flight ", i))
		}()
	}
	for range n {
		if !h.awaitRequest(arrived) {
			p.kill()
			wg.Wait()
			return 0, "", fmt.Errorf("only some of the %d runs reached the model", n)
		}
	}
	peak := p.peakRSS()
	p.cmd.Process.Signal(sig)
	exited := p.waitExit(30 * time.Second)
	if !exited {
		p.kill()
	}
	// The journals are read only after the process is gone: what is there was written
	// before it exited.
	var problems []string
	if !exited {
		problems = append(problems, "the server did not exit within 30 s of the signal")
	} else if st := p.exitStatus(); st != "exit 0" {
		// runs.md: once every run has written terminated the server exits 0, whether the
		// shutdown began with a signal or with stdin closing.
		problems = append(problems, fmt.Sprintf("the server %s after the signal, not exit 0", st))
	}
	c, err := takeCensus(dir)
	if err != nil {
		problems = append(problems, fmt.Sprintf("census: %v", err))
	} else {
		if c.total != n {
			problems = append(problems, fmt.Sprintf("%d journals for %d runs in flight", c.total, n))
		}
		for _, rep := range c.reports {
			if rep.ExitCode() != 0 || rep.TerminalReason != "cancelled" || rep.Released {
				problems = append(problems, fmt.Sprintf("journal %s: status %s, terminal %q, released %v, problems %v",
					rep.RunID, rep.Status, rep.TerminalReason, rep.Released, rep.Problems))
			}
		}
	}
	p.stdin.Close()
	wg.Wait()
	p.stdout.Close()
	for i, o := range outs {
		if o.released() {
			problems = append(problems, fmt.Sprintf("call %d received text %q", i, clip(o.text, 60)))
		}
	}
	if len(problems) > 0 {
		return peak, p.exitStatus(), fmt.Errorf("%s; stderr: %s", strings.Join(problems, "; "), p.stderr.tail())
	}
	return peak, strings.ReplaceAll(p.exitStatus(), " ", "_"), nil
}
