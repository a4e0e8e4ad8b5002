package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// gatedWriter blocks every Write until open is closed, then keeps what is written.
type gatedWriter struct {
	open chan struct{}
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Write(p)
}

// TestLogSinkNeverBlocks: a log line is queued, never written by its caller: with stderr
// not read, writes return at once; the lines past the queue are dropped, and a line says
// how many where they were dropped; Close writes what waits, and nothing is taken after it.
func TestLogSinkNeverBlocks(t *testing.T) {
	w := &gatedWriter{open: make(chan struct{})}
	s := newLogSink(w)
	const n = 3 * logQueue
	for i := range n { // would block at once without the queue: the writer is shut
		if k, err := fmt.Fprintf(s, "line %d\n", i); err != nil || k == 0 {
			t.Fatalf("write %d: %d, %v", i, k, err)
		}
	}
	close(w.open)
	s.Close(hangGuard, nil)
	fmt.Fprintf(s, "after close\n")
	// Every line is accounted for, in order: written, or counted where it was dropped.
	next := 0
	for _, l := range strings.Split(strings.TrimSuffix(w.buf.String(), "\n"), "\n") {
		var i int
		if _, err := fmt.Sscanf(l, "symbi: %d log lines dropped: stderr was not read", &i); err == nil {
			next += i
			continue
		}
		if l != fmt.Sprintf("line %d", next) {
			t.Fatalf("%q where line %d (or a count of lines dropped) belongs", l, next)
		}
		next++
	}
	if next != n {
		t.Fatalf("%d lines accounted for, %d written", next, n)
	}
	if strings.Contains(w.buf.String(), "after close") {
		t.Fatal("a line written after Close was written")
	}
}
