package serve

import (
	"log/slog"
	"syscall"
	"testing"
	"time"
)

// TestShutdownWatch: the first signal begins the shutdown (the watch's context is done) and
// does not hurry it; a signal once the shutdown has begun — by a signal or for another
// reason — hurries it, each time. The signals are sent to the test process itself, which
// the watch's signal.Notify keeps alive: no other test may run beside it (no t.Parallel).
func TestShutdownWatch(t *testing.T) {
	for _, c := range []struct {
		name  string
		begin bool // the shutdown begins for another reason before the first signal
		sigs  []syscall.Signal
		want  int // hurries
	}{
		{"one signal", false, []syscall.Signal{syscall.SIGHUP}, 0},
		{"two signals", false, []syscall.Signal{syscall.SIGHUP, syscall.SIGINT}, 1},
		{"begun, then a signal", true, []syscall.Signal{syscall.SIGHUP}, 1},
		{"begun, then two signals", true, []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			hurried := make(chan struct{}, 4)
			w := WatchSignals(slog.New(slog.DiscardHandler))
			w.setHurry(func() { hurried <- struct{}{} })
			defer w.End()
			if c.begin {
				w.begin("the test")
			}
			got := 0
			for i, s := range c.sigs {
				if err := syscall.Kill(syscall.Getpid(), s); err != nil {
					t.Fatal(err)
				}
				// Each signal is seen before the next is sent: the first, if it begins the
				// shutdown, by the context; any other by a hurry.
				if i == 0 && !c.begin {
					select {
					case <-w.Context().Done():
					case <-time.After(time.Minute):
						t.Fatal("the first signal did not begin the shutdown")
					}
					continue
				}
				select {
				case <-hurried:
					got++
				case <-time.After(time.Minute):
					t.Fatalf("signal %d (%v) did not hurry the shutdown", i, s)
				}
			}
			if c.begin && w.Context().Err() != nil {
				t.Fatal("a shutdown begun for another reason made the signals' context done")
			}
			w.End() // waits for the watch to end: every hurry is counted
			if got += len(hurried); got != c.want {
				t.Fatalf("%d hurries, want %d", got, c.want)
			}
			// Hurried — what cuts the last log lines' flush short — is closed by a hurrying
			// signal only: the signal that begins an ordinary shutdown leaves the flush whole.
			select {
			case <-w.Hurried():
				if c.want == 0 {
					t.Fatal("the signal that began the shutdown closed Hurried")
				}
			default:
				if c.want > 0 {
					t.Fatal("a signal that hurried the shutdown left Hurried open")
				}
			}
		})
	}
}
