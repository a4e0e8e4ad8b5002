package main

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"symbi/internal/faultproxy"
)

// faultHarness builds symbi and the fault proxy (internal/faultproxy) and returns a harness
// run whose binary is the proxy with f over the real symbi, and the file counting its
// rewrites.
func faultHarness(t *testing.T, f faultproxy.Fault) (*harnessRun, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds symbi and runs servers")
	}
	dir := t.TempDir()
	real := filepath.Join(dir, "symbi-real")
	if out, err := exec.Command("go", "build", "-o", real, "../symbi").CombinedOutput(); err != nil {
		t.Fatalf("go build ../symbi: %v\n%s", err, out)
	}
	proxy, err := faultproxy.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	f.Hits = filepath.Join(dir, "hits")
	wrapper, err := faultproxy.Script(dir, proxy, real, f)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "harness")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	h := &harnessRun{config: config{bin: wrapper, seed: 1, sizes: shortSizes}, rng: rand.New(rand.NewPCG(1, 0)), tmp: tmp}
	t.Cleanup(func() { removeAll(tmp) })
	return h, f.Hits
}

// TestShutdownExitStatusAsserted: the shutdown harness fails a server that, after the
// signal, writes every terminated record and then exits other than 0 (runs.md: the server
// exits 0 whether the shutdown began with a signal or with stdin closing). The proxy
// forwards the signal to the real server and exits 3 once it has exited.
func TestShutdownExitStatusAsserted(t *testing.T) {
	three := 3
	h, _ := faultHarness(t, faultproxy.Fault{Exit: &three})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, exit, err := h.shutdownCase(ctx, syscall.SIGTERM)
	if exit != "exit_3" && (err == nil || !strings.Contains(err.Error(), "exit 3")) {
		t.Fatalf("precondition: the proxied server did not exit 3 (exit %q, err %v)", exit, err)
	}
	if err == nil {
		t.Fatalf("the server exited %s after SIGTERM, not 0, and the shutdown harness passed", exit)
	}
}

// TestStorageLeakInStructuredContent: the storage harness's "never carry the model's text"
// (docs/reliability.md) reads the whole result the client received, not only its text: a
// faulty run whose result carries the model's SECRET answer in its structuredContent fails
// it. The proxy adds the secret to the audit_unavailable result of the "governed directory
// removed mid-run" case.
func TestStorageLeakInStructuredContent(t *testing.T) {
	h, hits := faultHarness(t, faultproxy.Fault{
		Old: `"structuredContent":{"error":{"code":"audit_unavailable"`,
		New: `"structuredContent":{"answer":"SECRET-the model's withheld answer","error":{"code":"audit_unavailable"`,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var sc storageCase
	for _, c := range storageCases {
		if strings.HasPrefix(c.name, "governed directory removed mid-run") {
			sc = c
		}
	}
	if sc.name == "" {
		t.Fatal("no storage case named \"governed directory removed mid-run\"")
	}
	_, err := h.storageCase(ctx, 3, sc)
	if faultproxy.Hits(hits) == 0 {
		t.Fatalf("precondition: the proxy never saw an audit_unavailable result (storage case: %v)", err)
	}
	if err == nil {
		t.Fatal("the faulty run's result carried the model's SECRET text in structuredContent, and the storage harness passed")
	}
}
