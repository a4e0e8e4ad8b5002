package syncbuf_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"symbi/internal/syncbuf"
)

// TestConcurrentWrites: writers and a reader at once (run with -race) lose no write.
func TestConcurrentWrites(t *testing.T) {
	var b syncbuf.Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				fmt.Fprintf(&b, "w%d-%d\n", i, j)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 800 {
		t.Fatalf("%d lines, want 800", n)
	}
}
