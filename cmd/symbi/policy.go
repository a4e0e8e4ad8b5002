package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"symbi/internal/errcode"
	"symbi/internal/invoke"
	"symbi/internal/policy"
	"symbi/internal/project"
)

var cmdPolicyCheck = &command{name: "policy check", summary: "load the project's Cedar policies and list files and policy ids (exit 1 if unusable)"}
var cmdPolicyEval = &command{name: "policy eval", summary: "dry-run a decision: respond for an agent's answer, or use_tool for a delegated agent's tool call (exit 0 when decided, 1 when not)"}

func init() {
	cmdPolicyCheck.run = runPolicyCheck
	register(cmdPolicyCheck)
	cmdPolicyEval.run = runPolicyEval
	register(cmdPolicyEval)
}

// runPolicyCheck runs symbi policy check.
func runPolicyCheck(e *env, args []string) int {
	fs := newFlags(e, cmdPolicyCheck)
	dir := fs.String("project", ".", "the project `DIR`")
	asJSON := fs.Bool("json", false, "print a JSON object instead of text")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(e.stderr, "symbi policy check: unexpected arguments %q\n", fs.Args())
		return 2
	}
	set, code := policyLoad(e, "policy check", *dir)
	if set == nil {
		return code
	}
	if *asJSON {
		if !printJSON(e, cmdPolicyCheck.name, policyCheckJSON(set)) {
			return 1
		}
	} else {
		policyPrintCheck(e, set)
	}
	if set.Mode == policy.ModeDenyAll {
		for _, p := range set.Problems {
			fmt.Fprintln(e.stderr, p.String())
		}
		fmt.Fprintf(e.stderr, "symbi policy check: deny_all: every response would be denied: %s\n", set.Reason)
		return 1
	}
	return 0
}

// runPolicyEval runs symbi policy eval.
func runPolicyEval(e *env, args []string) int {
	fs := newFlags(e, cmdPolicyEval)
	dir := fs.String("project", ".", "the project `DIR`")
	agent := fs.String("agent", "", "the `AGENT`, by its file stem (required)")
	caller := fs.String("caller", invoke.CallerStdio, "the `CALLER` the decision is made for (context.caller)")
	response := fs.String("response", "", "respond: the answer `TEXT`")
	responseFile := fs.String("response-file", "", "respond: read the answer text from `FILE`")
	action := fs.String("action", policy.ActionRespond, "the `ACTION`: respond or use_tool")
	tool := fs.String("tool", "", "use_tool: the tool `KIND` ("+strings.Join(policy.ToolKinds, ", ")+")")
	title := fs.String("title", "", "use_tool: the call's `TITLE`")
	var paths listFlag
	fs.Var(&paths, "path", "use_tool: a `PATH` the call names, relative to the workspace or absolute (repeatable)")
	workspace := fs.String("workspace", "", "use_tool: the workspace `DIR` (default: the project directory)")
	asJSON := fs.Bool("json", false, "print a JSON object instead of text")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	useTool := *action == policy.ActionUseTool
	switch {
	case fs.NArg() != 0:
		fmt.Fprintf(e.stderr, "symbi policy eval: unexpected arguments %q\n", fs.Args())
		return 2
	case *agent == "":
		fmt.Fprintln(e.stderr, "symbi policy eval: --agent is required")
		return 2
	case *action != policy.ActionRespond && !useTool:
		fmt.Fprintf(e.stderr, "symbi policy eval: --action %q: want respond or use_tool\n", *action)
		return 2
	case !useTool && set["response"] == set["response-file"]:
		fmt.Fprintln(e.stderr, "symbi policy eval: give exactly one of --response and --response-file")
		return 2
	case !useTool && (set["tool"] || set["title"] || set["path"] || set["workspace"]):
		fmt.Fprintln(e.stderr, "symbi policy eval: --tool, --title, --path and --workspace go with --action use_tool")
		return 2
	case useTool && (set["response"] || set["response-file"]):
		fmt.Fprintln(e.stderr, "symbi policy eval: --response and --response-file go with --action respond")
		return 2
	case useTool && *tool == "":
		fmt.Fprintln(e.stderr, "symbi policy eval: --tool is required with --action use_tool")
		return 2
	}
	text := *response
	if set["response-file"] {
		b, err := policyReadResponse(*responseFile)
		if err != nil {
			fmt.Fprintf(e.stderr, "symbi policy eval: %s\n", errcode.Text(err))
			return 1
		}
		text = string(b)
	}
	p, reg, err := openRegistry(*dir, slog.New(slog.NewTextHandler(e.stderr, nil)))
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi policy eval: %s\n", errcode.Text(err))
		return 1
	}
	defer p.Close()
	a, err := reg.Resolve(*agent)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi policy eval: %s\n", errcode.Text(err))
		return 1
	}
	pol := policy.Load(p.Root())
	if pol.Mode == policy.ModeDenyAll {
		fmt.Fprintf(e.stderr, "symbi policy eval: policies unusable, every response is denied: %s\n", pol.Reason)
	}
	req := policy.NewRequest(a, policyDryRunID, text, policy.Surface, *caller)
	if useTool {
		ws := *workspace
		if ws == "" {
			ws = p.Path()
		}
		req = policy.NewToolRequest(a, policyDryRunID, policy.Surface, *caller, toolUse(*tool, *title, ws, paths))
	}
	out := policyEvalJSON(pol, req, pol.Decide(req))
	if *asJSON {
		if !printJSON(e, cmdPolicyEval.name, out) {
			return 1
		}
		return 0
	}
	fmt.Fprintf(e.stdout, "decision: %s\n", out.Decision)
	fmt.Fprintf(e.stdout, "action: %s\n", out.Action)
	if out.Tool != nil {
		fmt.Fprintf(e.stdout, "tool: %s, paths %s (top dirs %s), outside %s, workspace %s\n", out.Tool.Kind, policyList(out.Tool.Paths), policyList(out.Tool.TopDirs()), policyList(out.Tool.Outside), out.Tool.Workspace)
	}
	fmt.Fprintf(e.stdout, "agent: %s (%s)\n", out.Agent, out.File)
	fmt.Fprintf(e.stdout, "mode: %s\n", out.Mode)
	fmt.Fprintf(e.stdout, "digest: %s\n", out.Digest)
	fmt.Fprintf(e.stdout, "policies: %s\n", policyList(out.Policies))
	fmt.Fprintf(e.stdout, "errors: %s\n", policyList(out.Errors))
	fmt.Fprintf(e.stdout, "reason: %s\n", out.Reason)
	return 0
}

// policyDryRunID is the run id (the resource) of a policy eval decision.
const policyDryRunID = "dry-run"

// policyMaxResponseFile bounds --response-file: the largest provider response
// body the server accepts.
const policyMaxResponseFile = 4 << 20

// policyReadResponse reads a --response-file of at most policyMaxResponseFile bytes.
func policyReadResponse(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, errcode.Wrap(errcode.NotFound, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, policyMaxResponseFile+1))
	if err != nil {
		return nil, errcode.Wrap(errcode.InvalidRequest, err)
	}
	if len(b) > policyMaxResponseFile {
		return nil, errcode.Errorf(errcode.LimitExceeded, "%s is larger than %d bytes (4 MiB)", name, policyMaxResponseFile)
	}
	return b, nil
}

type policyEvalOutput struct {
	Decision string          `json:"decision"`
	Action   string          `json:"action"`
	Tool     *policy.ToolUse `json:"tool,omitempty"`
	Mode     policy.Mode     `json:"mode"`
	Digest   string          `json:"digest"`
	Policies []string        `json:"policies"`
	Errors   []string        `json:"errors"`
	Reason   string          `json:"reason"`
	Agent    string          `json:"agent"`
	AgentID  string          `json:"agent_id"`
	File     string          `json:"file"`
	RunID    string          `json:"run_id"`
	Bytes    int             `json:"response_bytes"`
}

func policyEvalJSON(set *policy.Set, req policy.Request, d policy.Decision) policyEvalOutput {
	return policyEvalOutput{
		Decision: d.Verdict(), Action: req.Action, Tool: req.Tool, Mode: set.Mode, Digest: set.Digest,
		Policies: append([]string{}, d.Policies...), Errors: append([]string{}, d.Errors...), Reason: d.Reason,
		Agent: req.Agent, AgentID: req.AgentID, File: req.File, RunID: req.RunID, Bytes: len(req.Response),
	}
}

func policyList(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, ", ")
}

// policyLoad pins the project directory and loads its policies; on failure it
// reports on stderr and returns (nil, 1).
func policyLoad(e *env, name, dir string) (*policy.Set, int) {
	p, err := project.Open(dir)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi %s: %s\n", name, errcode.Text(err))
		return nil, 1
	}
	defer p.Close()
	return policy.Load(p.Root()), 0
}

func policyPrintCheck(e *env, set *policy.Set) {
	fmt.Fprintf(e.stdout, "mode: %s\n", set.Mode)
	fmt.Fprintf(e.stdout, "digest: %s\n", set.Digest)
	if set.Mode == policy.ModeDefault {
		fmt.Fprintln(e.stdout, "no policy files: the built-in default permits respond")
		return
	}
	byFile := map[string][]policy.Policy{}
	for _, p := range set.Policies() {
		byFile[p.File] = append(byFile[p.File], p)
	}
	for _, f := range set.Files {
		fmt.Fprintln(e.stdout, f)
		for _, p := range byFile[f] {
			fmt.Fprintf(e.stdout, "  %s %s (%d:%d)\n", p.Effect, p.ID, p.Line, p.Column)
		}
	}
}

type policyEntryJSON struct {
	ID     string `json:"id"`
	Effect string `json:"effect"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
}

type policyFileJSON struct {
	File     string            `json:"file"`
	Policies []policyEntryJSON `json:"policies"`
}

type policyProblemJSON struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Message string `json:"message"`
}

type policyCheckOutput struct {
	Mode     policy.Mode         `json:"mode"`
	Digest   string              `json:"digest"`
	Reason   string              `json:"reason,omitempty"`
	Files    []policyFileJSON    `json:"files"`
	Problems []policyProblemJSON `json:"problems"`
}

func policyCheckJSON(set *policy.Set) policyCheckOutput {
	out := policyCheckOutput{Mode: set.Mode, Digest: set.Digest, Reason: set.Reason, Files: []policyFileJSON{}, Problems: []policyProblemJSON{}}
	index := map[string]int{}
	for _, f := range set.Files {
		index[f] = len(out.Files)
		out.Files = append(out.Files, policyFileJSON{File: f, Policies: []policyEntryJSON{}})
	}
	for _, p := range set.Policies() {
		i := index[p.File]
		out.Files[i].Policies = append(out.Files[i].Policies, policyEntryJSON{ID: p.ID, Effect: p.Effect, Line: p.Line, Column: p.Column})
	}
	for _, p := range set.Problems {
		out.Problems = append(out.Problems, policyProblemJSON{File: p.File, Line: p.Line, Column: p.Column, Message: p.Message})
	}
	return out
}

// toolUse builds the use_tool request's subject: each path made relative to the
// workspace; an absolute path outside it, or a relative one that leaves it, is outside.
func toolUse(kind, title, workspace string, paths []string) policy.ToolUse {
	t := policy.ToolUse{Kind: kind, Title: title, Workspace: workspace, Paths: []string{}}
	for _, p := range paths {
		if filepath.IsAbs(p) {
			rel, err := filepath.Rel(workspace, p)
			if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				t.Outside = append(t.Outside, p)
				continue
			}
			p = rel
		}
		p = filepath.Clean(p)
		if p == ".." || strings.HasPrefix(p, "../") {
			t.Outside = append(t.Outside, p)
			continue
		}
		t.Paths = append(t.Paths, p)
	}
	return t
}
