package main

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"symbi/internal/errcode"
)

// logQueue bounds the log lines waiting to be written to stderr.
const logQueue = 1024

// maxLogAttrBytes bounds one value of a log line: a client's text the SDK logs (a
// logging/setLevel level, a method name) could otherwise be a 16 MiB line each, and the
// queue hold logQueue of them. The agent's own words an ACP run logs are at most 8 KiB.
const maxLogAttrBytes = 16 << 10

// clipAttr is the log handler's ReplaceAttr: a value whose text is longer than
// maxLogAttrBytes — a string, an error, any value printed as text (the SDK logs a client's
// level as its own string type) — is cut there, saying its length.
func clipAttr(_ []string, a slog.Attr) slog.Attr {
	if k := a.Value.Kind(); k != slog.KindString && k != slog.KindAny {
		return a // numbers, times, durations, groups: short, or cut member by member
	}
	if s := a.Value.String(); len(s) > maxLogAttrBytes {
		return slog.String(a.Key, errcode.ClipTo(s, maxLogAttrBytes))
	}
	return a
}

// logFlushWait bounds how long symbi mcp waits, at exit, for its last log lines to be
// written: a stderr nobody reads never drains.
const logFlushWait = 5 * time.Second

// logSink writes the server's log lines to w on its own goroutine, so that no log call
// waits for w: a stderr nobody reads (a pipe left full by the client) must not hold a
// run, its slot or the shutdown. At most logQueue lines wait; past that, lines are dropped,
// and where they were dropped a line says how many. Each Write is one line (slog handlers
// write a record at once).
type logSink struct {
	w       io.Writer
	mu      sync.Mutex
	closed  bool
	pending int // lines dropped since the last one queued
	ch      chan queuedLine
	done    chan struct{}
}

// queuedLine is a log line and how many were dropped just before it.
type queuedLine struct {
	dropped int
	line    []byte
}

func newLogSink(w io.Writer) *logSink {
	s := &logSink{w: w, ch: make(chan queuedLine, logQueue), done: make(chan struct{})}
	go s.run()
	return s
}

// Write queues a copy of p; it never blocks, and never fails.
func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return len(p), nil
	}
	select {
	case s.ch <- queuedLine{s.pending, append([]byte(nil), p...)}:
		s.pending = 0
	default:
		s.pending++
	}
	return len(p), nil
}

func (s *logSink) run() {
	defer close(s.done)
	for q := range s.ch {
		s.dropped(q.dropped)
		s.w.Write(q.line)
	}
	// Those dropped after the last line queued (the channel is closed: no more come).
	s.mu.Lock()
	n := s.pending
	s.mu.Unlock()
	s.dropped(n)
}

func (s *logSink) dropped(n int) {
	if n > 0 {
		fmt.Fprintf(s.w, "symbi: %d log lines dropped: stderr was not read\n", n)
	}
}

// Close stops taking lines and waits, at most d and until cut is closed (nil: never), for
// the queued ones to be written.
func (s *logSink) Close(d time.Duration, cut <-chan struct{}) {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
	s.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
	case <-cut: // told to stop: the rest is not waited for
	}
}
