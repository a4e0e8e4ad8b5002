package main

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkStartup measures the time from starting "symbi mcp" on a project with a
// 1,024-file registry to its answer to initialize (target: within 50 ms).
func BenchmarkStartup(b *testing.B) {
	dir := b.TempDir()
	for i := range 1024 {
		src := fmt.Sprintf("metadata { description = \"agent %d\" }\nagent a%d {\n  capabilities = [\"answer\"]\n  with timeout = 30.seconds {}\n}\n", i, i)
		writeFile(b, filepath.Join(dir, "agents", fmt.Sprintf("a%04d.symbi", i)), src)
	}
	writeFile(b, filepath.Join(dir, "policies", "respond.cedar"), e2ePolicy)
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}` + "\n"
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(symbiBin, "mcp", "--project", dir, "--log-level", "error")
		cmd.Env = modelEnv(nil)
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		io.WriteString(stdin, initialize)
		line, err := bufio.NewReader(stdout).ReadString('\n')
		total += time.Since(t0)
		if err != nil || !strings.Contains(line, `"protocolVersion"`) {
			b.Fatalf("initialize answer %q: %v", line, err)
		}
		stdin.Close()
		cmd.Wait()
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms-to-initialize")
}
