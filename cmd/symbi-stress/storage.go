package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"symbi/internal/loopback"
)

// setFileSizeLimit sets RLIMIT_FSIZE of process pid. A Go program ignores SIGXFSZ, so a
// write past the limit fails with EFBIG instead of killing the server.
func setFileSizeLimit(pid int, bytes uint64) error {
	lim := unix.Rlimit{Cur: bytes, Max: bytes}
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &lim, nil); err != nil {
		return fmt.Errorf("prlimit RLIMIT_FSIZE of pid %d: %w", pid, err)
	}
	return nil
}

// storageCase is one storage fault.
type storageCase struct {
	name string
	// fsize is the server's RLIMIT_FSIZE in bytes (0: none).
	fsize uint64
	// unprivileged runs the server as nobody when the harness is root, so that file
	// permissions bind it.
	unprivileged bool
	// before prepares the project once the server runs; the first invocation succeeded
	// when warm is set (so the key exists).
	warm   bool
	before func(dir string) error
	// hook runs when the model receives the faulty run's request.
	hook func(dir string)
	// reply is the model's answer to the faulty run.
	reply loopback.Reply
	// code is the error code the faulty run must get; calls is how many model calls it may
	// have made.
	code  string
	calls int
	// after repairs the project before the last invocation, which must then succeed.
	after func(dir string) error
	// persists: the fault stays (every journal hits the limit), so the last invocation
	// must fail the same way instead.
	persists bool
}

// secretText is a model answer that must never reach the client when a write fails.
var secretText = "SECRET-" + strings.Repeat("x", 32<<10)

var storageCases = []storageCase{
	{
		name: "disk full before the model call (RLIMIT_FSIZE 512 B)", fsize: 512,
		code: "audit_unavailable", calls: 0, persists: true,
	},
	{
		name: "disk full after the model answered (RLIMIT_FSIZE 8 KiB, 32 KiB answer)", fsize: 8 << 10,
		reply: loopback.Reply{Text: secretText}, code: "audit_unavailable", calls: 1,
	},
	{
		name: "read-only governed directory", unprivileged: true, warm: true,
		before: func(dir string) error { return os.Chmod(governed(dir), 0o500) },
		code:   "audit_unavailable", calls: 0,
		after: func(dir string) error { return os.Chmod(governed(dir), 0o700) },
	},
	{
		name: "governed directory removed mid-run", warm: true,
		hook:  func(dir string) { os.RemoveAll(governed(dir)) },
		reply: loopback.Reply{Text: secretText}, code: "audit_unavailable", calls: 1,
	},
}

// runStorage runs each storage fault against its own server: the faulty invocation must
// fail with its code and withhold the text, any journal left must not be invalid, and the
// server must keep serving (list_agents, then a normal invocation).
func runStorage(ctx context.Context, h *harnessRun, r *result) {
	var peak int64
	for i, sc := range storageCases {
		kib, err := h.storageCase(ctx, i, sc)
		peak = max(peak, kib)
		if err != nil {
			r.failf("%s: %v", sc.name, err)
		}
	}
	r.figure("cases", len(storageCases))
	r.figure("peak_rss", mib(peak))
}

// storageCase runs one storage fault and returns the server's peak RSS.
func (h *harnessRun) storageCase(ctx context.Context, i int, sc storageCase) (peak int64, err error) {
	dir, err := h.newProject(fmt.Sprintf("storage%d", i))
	if err != nil {
		return 0, err
	}
	model, err := startModel(loopback.WithReply(loopback.Reply{Text: "fine"}))
	if err != nil {
		return 0, err
	}
	defer model.Close()
	opts := procOptions{fsizeByte: sc.fsize}
	bin := h.bin
	if sc.unprivileged && os.Geteuid() == 0 {
		if bin, err = h.runAsNobody(dir, &opts); err != nil {
			return 0, err
		}
	}
	p, err := h.startProc(bin, dir, modelEnv(model.URL()), opts)
	if err != nil {
		return 0, err
	}
	cs, err := p.connect(ctx)
	if err != nil {
		p.kill()
		return 0, err
	}
	defer func() {
		peak = p.peakRSS()
		p.stop(cs)
	}()
	if sc.warm {
		if o := invoke(ctx, cs, "helper", "warm up"); !o.released() {
			return 0, fmt.Errorf("first invocation: %s", o)
		}
	}
	if sc.before != nil {
		if err := sc.before(dir); err != nil {
			return 0, err
		}
	}
	if sc.hook != nil {
		model.OnRequest(func(loopback.Request) { sc.hook(dir) })
	}
	if sc.reply.Text != "" {
		model.Script(sc.reply)
	}
	n0 := len(model.Requests())
	o := invoke(ctx, cs, "helper", "the faulty run")
	model.OnRequest(nil)
	var problems []string
	if o.err != nil || o.code != sc.code {
		problems = append(problems, fmt.Sprintf("faulty run gave %s, want %s", o, sc.code))
	}
	if err := checkWithheld(o, "SECRET-", ""); err != nil {
		problems = append(problems, err.Error())
	}
	if n := len(model.Requests()) - n0; n != sc.calls {
		problems = append(problems, fmt.Sprintf("the model received %d requests, want %d", n, sc.calls))
	}
	if err := listAgents(ctx, cs); err != nil {
		problems = append(problems, fmt.Sprintf("list_agents after the fault: %v", err))
	}
	if sc.after != nil {
		if err := sc.after(dir); err != nil {
			return 0, err
		}
	}
	switch {
	case sc.persists:
		o := invoke(ctx, cs, "helper", "the fault persists")
		if o.err != nil || o.code != sc.code {
			problems = append(problems, fmt.Sprintf("invocation under the persisting fault gave %s, want %s", o, sc.code))
		}
		if err := checkWithheld(o, "SECRET-", ""); err != nil {
			problems = append(problems, err.Error())
		}
	case sc.hook == nil:
		// The fault is gone (a new file under the size limit, permissions restored): the
		// server serves a governed run again.
		if o := invoke(ctx, cs, "helper", "after the fault"); !o.released() || o.text != "fine" {
			problems = append(problems, fmt.Sprintf("invocation after the fault: %s", o))
		} else if err := checkReleased(o); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if c, err := takeCensus(dir); err == nil {
		for _, inv := range c.invalid {
			problems = append(problems, "invalid journal: "+inv)
		}
	} else if !os.IsNotExist(err) {
		problems = append(problems, fmt.Sprintf("census: %v", err))
	}
	if len(problems) > 0 {
		return peak, fmt.Errorf("%s; stderr: %s", strings.Join(problems, "; "), p.stderr.tail())
	}
	return peak, nil
}

// nobody is the user a root harness runs unprivileged servers as.
const nobody = 65534

// runAsNobody makes dir and a copy of the binary usable by nobody and sets opts to run as
// nobody; it returns the copy's path.
func (h *harnessRun) runAsNobody(dir string, opts *procOptions) (string, error) {
	binDir := filepath.Join(h.tmp, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", err
	}
	data, err := os.ReadFile(h.bin)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(binDir, "symbi")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		return "", err
	}
	for _, d := range []string{h.tmp, binDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			return "", err
		}
	}
	err = filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, nobody, nobody)
	})
	if err != nil {
		return "", err
	}
	opts.cred = &syscall.Credential{Uid: nobody, Gid: nobody}
	return bin, nil
}
