package serve

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// logNotify is a slog handler that closes ch at the first record whose message is msg.
type logNotify struct {
	msg  string
	ch   chan struct{}
	once *sync.Once
}

func (h logNotify) Enabled(context.Context, slog.Level) bool { return true }
func (h logNotify) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.ch) })
	}
	return nil
}
func (h logNotify) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logNotify) WithGroup(string) slog.Handler      { return h }

// TestHTTPRefusesUnauthenticatedWildcard: without authentication HTTP binds only loopback
// addresses and refuses any other at start, whoever calls it — not only after symbi mcp's
// flag checks.
func TestHTTPRefusesUnauthenticatedWildcard(t *testing.T) {
	serving := make(chan struct{})
	log := slog.New(logNotify{msg: "serving", ch: serving, once: new(sync.Once)})
	w := WatchSignals(log)
	defer w.End()
	env := map[string]string{"GOGC": "100"}
	o := Options{Dir: t.TempDir(), MaxRuns: 1, ApprovalTimeout: time.Hour,
		Getenv: func(k string) string { return env[k] }, Log: log, Watch: w}
	done := make(chan error, 1)
	go func() {
		done <- HTTP(o, HTTPOptions{Addr: "0.0.0.0:0", MaxSessions: 1, MaxSessionsCaller: 1})
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Fatalf("serve.HTTP: %v; want the refusal of a non-loopback address without authentication", err)
		}
	case <-serving:
		// Armed before "serving": SIGHUP begins the ordered shutdown.
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		<-done
		t.Fatal("serve.HTTP served MCP without authentication on every interface (0.0.0.0:0); want the loopback-only refusal (mcpserver.CheckListenAddr)")
	}
}
