package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The delegated run: agents/pair_coder.symbi names the executor "coder", which the demo,
// as the operator, registers as the scripted fake ACP agent.
const (
	delegatedAgent    = "pair_coder"
	delegatedExecutor = "coder"
	// delegatedRead is the file the agent reads through symbi, relative to its workspace
	// (the project directory, start_run's default); policies/tools.cedar permits reads
	// anywhere in the workspace (tools-read-search).
	delegatedRead = "agents/reviewer.symbi"
	// delegatedCommand is the command it asks to run; tools-no-execute forbids it.
	delegatedCommand = "go test ./..."
	delegatedPrompt  = "Read " + delegatedRead + ", say what the reviewer agent may do, and run the tests."
	delegatedAnswer  = delegatedRead + " defines reviewer, a conversational agent (capabilities code_review and explain) whose answers pass the respond gate. I did not run the tests: running commands was denied."
)

// delegation is what the operator prepares for the delegated run.
type delegation struct {
	executors string // the --executors file
	script    string // the fake agent's script (FAKE_ACP_SCRIPT)
	content   string // the file the agent reads, as it is on disk
}

// prepareDelegation writes, in dir, the executors file registering fakeAgent as
// delegatedExecutor and the script the fake agent follows.
func prepareDelegation(dir, fakeAgent, project string) (delegation, error) {
	// command[0] must be absolute or found on PATH's absolute entries: make it absolute.
	bin, err := filepath.Abs(fakeAgent)
	if err != nil {
		return delegation{}, err
	}
	if st, err := os.Stat(bin); err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return delegation{}, fmt.Errorf("the fake ACP agent %s is missing or not executable (make demo builds it: go build -o bin/fake-acp-agent ./cmd/fake-acp-agent)", bin)
	}
	content, err := os.ReadFile(filepath.Join(project, delegatedRead))
	if err != nil {
		return delegation{}, fmt.Errorf("the file the delegated agent reads: %w", err)
	}
	d := delegation{
		executors: filepath.Join(dir, "executors.json"),
		script:    filepath.Join(dir, "fake-acp-script.json"),
		content:   string(content),
	}
	executors := map[string]any{"executors": map[string]any{delegatedExecutor: map[string]any{"command": []string{bin}}}}
	script := map[string]any{
		"forbid_terminal":        true, // symbi offers no terminal
		"require_fs":             true, // and offers file reads and writes, gated
		"expect_prompt_contains": []string{delegatedRead},
		"steps": []map[string]any{
			{"thought": "I'll read the reviewer's definition first."},
			{"read": "$CWD/" + delegatedRead, "expect_error": false, "expect_content": d.content},
			{"permission": map[string]any{"tool_call_id": "run-tests", "kind": "execute", "title": delegatedCommand, "locations": []string{"$CWD"}}, "expect": "reject"},
			{"message": delegatedAnswer},
			{"stop_reason": "end_turn"},
		},
	}
	for path, v := range map[string]any{d.executors: executors, d.script: script} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return delegation{}, err
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return delegation{}, err
		}
		// The executors file decides what programs the server runs: symbi refuses it when
		// group or others may write it, whatever the umask made of the mode above.
		if err := os.Chmod(path, 0o644); err != nil {
			return delegation{}, err
		}
	}
	return d, nil
}

// delegatedRun shows a delegated agent: refused without --executors, refused by
// invoke_agent, then run with start_run — a permitted read, a denied command, an answer
// through the respond gate — its events followed and its journal verified.
func delegatedRun(ctx context.Context, out io.Writer, session *mcp.ClientSession, symbi, project string, d delegation) error {
	// Without the operator's registration the definition is refused, naming the flag.
	step(out, "symbi agents list --project %s --json (without --executors)", project)
	b, err := exec.Command(symbi, "agents", "list", "--project", project, "--json").Output()
	if err != nil {
		return fmt.Errorf("symbi agents list: %w", err)
	}
	var entries []agentEntry
	if err := json.Unmarshal(b, &entries); err != nil {
		return fmt.Errorf("symbi agents list --json: %w", err)
	}
	i := slices.IndexFunc(entries, func(e agentEntry) bool { return e.Name == delegatedAgent })
	if i < 0 || entries[i].Invocable || !strings.Contains(entries[i].Reason, "--executors") {
		return fmt.Errorf("expected %s refused without --executors, naming the flag: %s", delegatedAgent, b)
	}
	fmt.Fprintf(out, "    %s refused: %s\n", delegatedAgent, entries[i].Reason)

	step(out, "invoke_agent %s (a delegated agent: this server registered %q with --executors)", delegatedAgent, delegatedExecutor)
	res, err := call(ctx, session, "invoke_agent", map[string]any{"agent": delegatedAgent, "prompt": delegatedPrompt})
	if err != nil {
		return err
	}
	if !res.IsError || !strings.HasPrefix(text(res), "refused_definition: ") || !strings.Contains(text(res), "start_run") {
		return fmt.Errorf("expected refused_definition naming start_run, got %q", text(res))
	}
	fmt.Fprintf(out, "    refused: %s\n", text(res))

	step(out, "start_run %s: %q (workspace: the project directory, the default)", delegatedAgent, delegatedPrompt)
	res, err = call(ctx, session, "start_run", map[string]any{"agent": delegatedAgent, "prompt": delegatedPrompt})
	if err != nil {
		return err
	}
	var started struct {
		RunID  string `json:"run_id"`
		Status string `json:"status"`
		Audit  audit  `json:"audit"`
	}
	if res.IsError || decode(res, &started) != nil || started.RunID == "" {
		return fmt.Errorf("start_run failed: %s", text(res))
	}
	fmt.Fprintf(out, "    run %s is %s: the fake agent is working over ACP\n", started.RunID, started.Status)
	events, err := followEvents(ctx, out, session, started.RunID)
	if err != nil {
		return err
	}
	if err := checkDelegatedEvents(events, len(d.content)); err != nil {
		return err
	}
	st, err := completedStatus(ctx, out, session, started.RunID)
	if err != nil {
		return err
	}
	if *st.Text != delegatedAnswer {
		return fmt.Errorf("run_status text %q, want the agent's final message %q", *st.Text, delegatedAnswer)
	}
	a := started.Audit
	a.Records, a.Head = st.Records, st.Head
	if err := verify(out, symbi, a, 0); err != nil {
		return err
	}
	fmt.Fprintln(out, "    the permissions, as the verified journal recorded them before the agent heard them:")
	for _, e := range events {
		if e.Type == "permission_decided" {
			what := strings.Join(e.Data.Paths, ", ")
			if e.Data.Kind != "read" {
				what = fmt.Sprintf("%q in %s", e.Data.Title, what)
			}
			fmt.Fprintf(out, "      %s %s: %s (policy %s)\n", e.Data.Kind, what, e.Data.Decision, strings.Join(e.Data.PolicyIDs, ", "))
		}
	}
	return nil
}

// checkDelegatedEvents expects the story the script tells: the read allowed by
// tools-read-search and done, the command denied by tools-no-execute, the answer released.
func checkDelegatedEvents(events []event, readBytes int) error {
	var types []string
	var decisions, reads []event
	for _, e := range events {
		types = append(types, e.Type)
		switch e.Type {
		case "permission_decided":
			decisions = append(decisions, e)
		case "fs_read":
			reads = append(reads, e)
		}
	}
	got := strings.Join(types, ",")
	if !strings.HasPrefix(got, "started,session_started,") || !strings.HasSuffix(got, ",session_finished,policy_evaluated,terminated") {
		return fmt.Errorf("delegated run events %s", got)
	}
	if len(decisions) != 2 {
		return fmt.Errorf("%d permission decisions, want 2 (the read, the command): %s", len(decisions), got)
	}
	var read, exec *eventData
	for i := range decisions {
		switch d := &decisions[i].Data; d.Kind {
		case "read":
			read = d
		case "execute":
			exec = d
		}
	}
	if read == nil || read.Decision != "allow" || !slices.Contains(read.PolicyIDs, "tools-read-search") || !slices.Equal(read.Paths, []string{delegatedRead}) {
		return fmt.Errorf("the read of %s: want allow by tools-read-search, got %+v", delegatedRead, read)
	}
	if exec == nil || exec.Decision != "deny" || !slices.Equal(exec.PolicyIDs, []string{"tools-no-execute"}) || exec.Title != delegatedCommand {
		return fmt.Errorf("the command %q: want deny by tools-no-execute, got %+v", delegatedCommand, exec)
	}
	if len(reads) != 1 || reads[0].Data.Path != delegatedRead || reads[0].Data.Bytes != readBytes {
		return fmt.Errorf("want one fs_read of %s, %d bytes: %+v", delegatedRead, readBytes, reads)
	}
	last := events[len(events)-1].Data
	if last.Reason != "completed" || !last.Released {
		return fmt.Errorf("terminated %+v, want completed and released", last)
	}
	return nil
}
