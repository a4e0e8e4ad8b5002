package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"symbi/internal/faultproxy"
)

// demoBinaries are symbi, the fake ACP agent and the fault proxy (internal/faultproxy),
// built once for the package's tests.
var demoBinaries struct {
	once sync.Once
	dir  string
	bins map[string]string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if demoBinaries.dir != "" {
		os.RemoveAll(demoBinaries.dir)
	}
	os.Exit(code)
}

// buildDemo builds (once) symbi, the fake ACP agent and the fault proxy, and returns their
// paths by name: "symbi", "fake", "proxy".
func buildDemo(t *testing.T) map[string]string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds symbi")
	}
	b := &demoBinaries
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "symbi-demo-test-*"); b.err != nil {
			return
		}
		b.bins = map[string]string{"symbi": filepath.Join(b.dir, "symbi"), "fake": filepath.Join(b.dir, "fake-acp-agent")}
		for target, pkg := range map[string]string{b.bins["symbi"]: "../symbi", b.bins["fake"]: "../fake-acp-agent"} {
			if out, err := exec.Command("go", "build", "-o", target, pkg).CombinedOutput(); err != nil {
				b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
		b.bins["proxy"], b.err = faultproxy.Build(b.dir)
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bins
}

// exampleProject copies the repository's example project (agents, policies, AGENTS.md)
// into a new directory and returns it.
func exampleProject(t *testing.T) string {
	t.Helper()
	project := filepath.Join(t.TempDir(), "example")
	for _, sub := range []string{"agents", "policies"} {
		if err := os.CopyFS(filepath.Join(project, sub), os.DirFS(filepath.Join("../..", sub))); err != nil {
			t.Fatal(err)
		}
	}
	md, err := os.ReadFile("../../AGENTS.md")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project, "AGENTS.md"), md, 0o644); err != nil {
		t.Fatal(err)
	}
	return project
}

// faultDemoSetup returns the binaries and a fresh copy of the example project, and points
// TMPDIR (where the demo puts its logs) at a directory of the test's own.
func faultDemoSetup(t *testing.T) (bins map[string]string, project string) {
	t.Helper()
	bins = buildDemo(t)
	t.Setenv("TMPDIR", t.TempDir())
	return bins, exampleProject(t)
}

// faultProxy writes a "symbi" wrapper running the fault proxy over the real binary with
// the given rewrite, and returns its path and the file counting the rewrites.
func faultProxy(t *testing.T, bins map[string]string, old, repl string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	hits := filepath.Join(dir, "hits")
	path, err := faultproxy.Script(dir, bins["proxy"], bins["symbi"], faultproxy.Fault{Old: old, New: repl, Hits: hits})
	if err != nil {
		t.Fatal(err)
	}
	return path, hits
}

// TestDemoCheckpointIsItsOwn: step 7's checkpoint is a file of this demo's own, not a
// fixed name in the shared temporary directory: another demo writing its checkpoint at
// the same time (a make demo beside make test's TestDemo, two CI jobs) breaks nothing.
// Here a goroutine plays the other demo, writing its project's checkpoint at the name a
// shared file would have.
func TestDemoCheckpointIsItsOwn(t *testing.T) {
	bins, project := faultDemoSetup(t)

	// Another demo's checkpoint: a note of another ledger's key, in the real form.
	key := make([]byte, 8)
	rand.Read(key)
	root := make([]byte, 32)
	rand.Read(root)
	sig := make([]byte, 68)
	rand.Read(sig)
	origin := "symbi.ledger/" + hex.EncodeToString(key)
	other := fmt.Sprintf("%s\n7\n%s\n\n— %s %s\n", origin, base64.StdEncoding.EncodeToString(root), origin, base64.StdEncoding.EncodeToString(sig))

	shared := filepath.Join(os.TempDir(), "symbi-demo-checkpoint.txt")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			os.WriteFile(shared, []byte(other), 0o644)
			time.Sleep(200 * time.Microsecond)
		}
	})
	var out bytes.Buffer
	err := demo(&out, bins["symbi"], bins["fake"], project, "reviewer")
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("a second demo writing its checkpoint at the same time broke this one: %v\n%s", err, tail(out.String(), 1500))
	}
}

// TestDemoLeakCheckReadsWholeResult: step 2's "the withheld text reached the client" check
// (and step 6's for the held text) reads the whole result as the client received it: a
// symbi that put the denied private key into the result's structuredContent fails the
// demo. The fault proxy adds it there, nothing else.
func TestDemoLeakCheckReadsWholeResult(t *testing.T) {
	bins, project := faultDemoSetup(t)
	old := `"structuredContent":{"error":{"code":"policy_denied"`
	leak := `"structuredContent":{"text":"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIDemoOnlyNotARealKeyDemoOnlyNotARealKey0\n-----END PRIVATE KEY-----\n","error":{"code":"policy_denied"`
	symbi, hits := faultProxy(t, bins, old, leak)
	var out bytes.Buffer
	err := demo(&out, symbi, bins["fake"], project, "reviewer")
	if faultproxy.Hits(hits) == 0 {
		t.Fatalf("the proxy never saw a policy_denied result (demo: %v)\n%s", err, tail(out.String(), 1500))
	}
	if err == nil {
		t.Fatalf("the denied private key reached the client in structuredContent, and the demo still passed:\n%s", tail(out.String(), 600))
	}
}

// TestDemoAnswerChecked: the texts released for the conversational invocation (step 1)
// and the asynchronous run (step 4) must be the model's answer, word for word: a symbi
// that released another text than its journal records — the journal on disk intact, so
// audit verify says valid and complete — fails the demo. The fault proxy replaces the
// model's answer in everything the stdio server sends.
func TestDemoAnswerChecked(t *testing.T) {
	bins, project := faultDemoSetup(t)
	symbi, hits := faultProxy(t, bins, "The loop re-reads the slice length on every pass", "TAMPERED: this is not what the model said")
	var out bytes.Buffer
	err := demo(&out, symbi, bins["fake"], project, "reviewer")
	if faultproxy.Hits(hits) == 0 {
		t.Fatalf("the proxy never saw the model's answer (demo: %v)\n%s", err, tail(out.String(), 1500))
	}
	if err == nil {
		t.Fatalf("symbi released a text the model never gave, and the demo passed:\n%s", grepLines(out.String(), "TAMPERED"))
	}
}

// TestDemoProjectVerifyRefusesACrash: step 7 accepts exit 0 of "symbi audit verify
// --project", or exit 2 only when the report says incomplete of runs recovered after an
// earlier crash — not a verifier that panicked (a Go panic exits 2) or was killed by a
// signal, having said nothing. A wrapper stands in for a verifier that crashes; every
// other command is the real symbi.
func TestDemoProjectVerifyRefusesACrash(t *testing.T) {
	for _, tc := range []struct{ name, crash string }{
		{"panic exits 2", "echo 'panic: runtime error: invalid memory address or nil pointer dereference' >&2; echo '[signal SIGSEGV: segmentation violation]' >&2; exit 2"},
		{"killed by a signal", "kill -KILL $$"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bins, project := faultDemoSetup(t)
			wrapper := filepath.Join(t.TempDir(), "symbi")
			script := fmt.Sprintf("#!/bin/sh\nif [ \"$1 $2 $3\" = \"audit verify --project\" ]; then\n  %s\nfi\nexec %s \"$@\"\n", tc.crash, "'"+bins["symbi"]+"'")
			if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err := demo(&out, wrapper, bins["fake"], project, "reviewer")
			if !strings.Contains(out.String(), "==> symbi audit verify --project") {
				t.Fatalf("precondition: the demo did not reach step 7: %v\n%s", err, tail(out.String(), 1500))
			}
			if err == nil {
				t.Fatalf("symbi audit verify --project crashed (%s) and the demo passed:\n%s", tc.name, tail(out.String(), 700))
			}
		})
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func grepLines(s, sub string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
