package serve

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// stopSignals are the signals that shut the server down.
var stopSignals = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP}

// Watch catches the stop signals for a server's life. A signal that arrives before
// the shutdown has begun begins it: the watch's context is done. Once the shutdown has
// begun — by that signal, or by begin for another reason (the client closed stdin or
// stopped reading, the HTTP server stopped) — every further signal hurries it. MCP
// clients close their server's input, then send SIGTERM after a moment and SIGKILL after
// another (the TypeScript SDK waits 2 s for each): a signal during a shutdown says
// little time is left, and a run's terminated record must be written before the kill.
type Watch struct {
	log     *slog.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	sigs    chan os.Signal
	quit    chan struct{}
	done    chan struct{}
	hurried chan struct{} // closed at the first signal that hurries the shutdown

	ended sync.Once

	mu    sync.Mutex
	begun bool
	hurry func()
}

// WatchSignals starts catching the stop signals. Until the server it is given to starts
// serving, a signal ends the process as it would uncaught; from then on the first begins
// the shutdown in order, and each further one hurries it.
func WatchSignals(log *slog.Logger) *Watch {
	w := &Watch{log: log, sigs: make(chan os.Signal, 4), quit: make(chan struct{}), done: make(chan struct{}), hurried: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	for _, s := range stopSignals {
		// SIGHUP or SIGINT ignored when the server started (nohup, a background job) stays
		// so. (SIGTERM the Go runtime catches whatever its disposition was.)
		if !signal.Ignored(s) {
			signal.Notify(w.sigs, s)
		}
	}
	go w.watch()
	return w
}

func (w *Watch) watch() {
	defer close(w.done)
	for {
		select {
		case s := <-w.sigs:
			w.mu.Lock()
			hurry := w.hurry
			w.mu.Unlock()
			if hurry == nil {
				// Start-up: nothing is served yet that a shutdown would end in order. The
				// signal does what it does without the watch: it ends the process.
				if sig, ok := s.(syscall.Signal); ok {
					signal.Reset(s)
					syscall.Kill(os.Getpid(), sig)
				}
				continue
			}
			// Log, then act: acted on first, the shutdown could be over — and the last
			// log lines flushed — before the line is logged, and it would be lost. A log
			// call does not wait for stderr to be read (Options.Log).
			if w.start() {
				w.log.Info("shutting down", "signal", s.String())
				w.cancel()
				continue
			}
			w.log.Warn("told again to stop: ending the runs in flight without the rest of their grace periods", "signal", s.String())
			select {
			case <-w.hurried:
			default:
				close(w.hurried)
			}
			hurry()
		case <-w.quit:
			return
		}
	}
}

// start marks the shutdown begun and reports whether this call began it.
func (w *Watch) start() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	first := !w.begun
	w.begun = true
	return first
}

// setHurry sets what a signal calls once the shutdown has begun.
func (w *Watch) setHurry(hurry func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hurry = hurry
}

// Hurried is closed at the first signal that comes once the shutdown has begun.
func (w *Watch) Hurried() <-chan struct{} { return w.hurried }

// Context is done when a signal began the shutdown.
func (w *Watch) Context() context.Context { return w.ctx }

// begin says the shutdown has begun, for the reason why unless it had already.
func (w *Watch) begin(why string) {
	if w.start() {
		w.log.Info("shutting down", "cause", why)
	}
}

// End ends the watch: the signals are no longer caught. It may be called again.
func (w *Watch) End() {
	w.ended.Do(func() {
		signal.Stop(w.sigs)
		close(w.quit)
		<-w.done
		w.cancel()
	})
}
