package mcpserver_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"symbi/internal/acp"
	"symbi/internal/auth"
	"symbi/internal/dsl"
	"symbi/internal/inference"
	"symbi/internal/invoke"
	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/mcpserver"
	"symbi/internal/project"
	"symbi/internal/runs"
	"symbi/internal/schemapin"
	"symbi/internal/workspace"
)

// TestREADMELimitsMatchConstants pins the README's limit table to the constants that
// enforce each limit: a constant changed without its row, or a row renamed, fails.
func TestREADMELimitsMatchConstants(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(data), "\n## Limits\n")
	if !ok {
		t.Fatal("README has no ## Limits section")
	}
	section, _, _ := strings.Cut(after, "\n## ")
	rows := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, " | ")
		if len(cells) == 2 && strings.HasPrefix(cells[0], "| ") {
			rows[strings.TrimPrefix(cells[0], "| ")] = strings.TrimSuffix(cells[1], " |")
		}
	}
	size := func(n int64) string {
		switch {
		case n >= 1<<30 && n%(1<<30) == 0:
			return fmt.Sprintf("%d GiB", n>>30)
		case n >= 1<<20 && n%(1<<20) == 0:
			return fmt.Sprintf("%d MiB", n>>20)
		case n >= 1<<10 && n%(1<<10) == 0:
			return fmt.Sprintf("%d KiB", n>>10)
		}
		return fmt.Sprint(n)
	}
	num := func(n int64) string { // 1,024
		s := fmt.Sprint(n)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	}
	want := map[string][]string{
		"`prompt`, `system_prompt` (each)":      {size(invoke.MaxPromptBytes)},
		"AGENTS.md / guidance taken from it":    {size(project.AgentsMDLimit) + " / " + num(project.GuidanceLimit) + " characters"},
		"DSL file, inline DSL":                  {size(dsl.MaxSourceBytes)},
		"registry scan":                         {num(project.RegistryMaxEntries) + " directory entries", size(project.RegistryRetainLimit) + " retained"},
		"project ledger":                        {size(ledger.MaxLedgerBytes)},
		"provider request body / response body": {size(inference.MaxRequestBytes) + " / " + size(inference.MaxResponseBytes)},
		"output tokens":                         {num(inference.MaxOutputTokens)},
		"provider's finish reason / model name": {fmt.Sprintf("%d / %d bytes", inference.MaxFinishReasonBytes, inference.MaxModelBytes)},
		"deadline":                              {fmt.Sprintf("%d s", int(invoke.MaxDeadline/time.Second)), map[time.Duration]string{24 * time.Hour: "1 s .. 1 day"}[dsl.MaxTimeout]},
		"`verify_schema`":                       {"schema " + size(schemapin.MaxSchemaBytes), "key URL " + size(schemapin.MaxKeyURLBytes), "key document " + size(schemapin.MaxKeyDocBytes)},
		"journal":                               {"record " + size(journal.MaxRecordBytes), "file " + size(journal.MaxFileBytes)},
		"a delegated (ACP) agent":               {"a path " + num(workspace.MaxPathBytes) + " bytes", "its answer " + size(acp.DefaultMaxTextBytes)},
		"runs in flight (`invoke_agent` and `start_run` together)": {fmt.Sprint(invoke.DefaultMaxRuns) + ", `--max-runs`"},
		"HTTP request bodies held (being read or served)":          {size(mcpserver.DefaultBodyBytesPerCaller) + " of one caller's", size(mcpserver.DefaultBodyBytes) + " in all", fmt.Sprintf("within %d min", int(mcpserver.DefaultBodyTimeout/time.Minute))},
		"HTTP sessions open": {num(mcpserver.DefaultMaxSessions) + " in all", fmt.Sprintf("%d per caller", mcpserver.DefaultMaxSessionsPerCaller),
			fmt.Sprintf("idle sessions closed after %d min", int(mcpserver.SessionIdle/time.Minute)), fmt.Sprintf("idle connections after %d min", int(mcpserver.ConnIdle/time.Minute))},
		"HTTP request body":                 {size(mcpserver.MaxMessageBytes)},
		"bearer token file / JWT / JWK set": {size(auth.MaxTokenFileBytes) + " and " + num(auth.MaxTokens) + " tokens / " + size(auth.MaxJWTBytes) + " / " + size(auth.MaxJWKSBytes) + " and " + num(auth.MaxJWKSKeys) + " keys"},
		"`run_events` / `list_runs` page":   {fmt.Sprintf("1..%d (default %d)", runs.MaxLimit, runs.DefaultLimit), "`wait_ms` 0.." + num(runs.MaxWait.Milliseconds())},
		"resolution note":                   {size(ledger.MaxNoteBytes)},
		"one inbound MCP message":           {size(mcpserver.MaxMessageBytes) + ", nesting " + num(mcpserver.MaxMessageDepth) + " levels"},
	}
	for row, subs := range want {
		got, ok := rows[row]
		if !ok {
			t.Errorf("README limits: no row %q", row)
			continue
		}
		for _, s := range subs {
			if s == "" || !strings.Contains(got, s) {
				t.Errorf("README limits, row %q: %q does not say %q (the constant)", row, got, s)
			}
		}
	}
}
