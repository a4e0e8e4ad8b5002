package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"symbi/internal/acp"
	"symbi/internal/auth"
	"symbi/internal/errcode"
	"symbi/internal/invoke"
	"symbi/internal/policy"
	"symbi/internal/project"
	"symbi/internal/runs"
	symbiws "symbi/internal/workspace"
)

var cmdPolicyCheck = &command{name: "policy check", summary: "load the project's Cedar policies and list files and policy ids (exit 1 if unusable)"}
var cmdPolicyEval = &command{name: "policy eval", summary: "dry-run a decision: respond for an agent's answer, use_tool for a delegated agent's tool call, or a run-access action (exit 0 when decided, 1 when not)"}

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
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	set, access, code := policyLoad(e, "policy check", *dir)
	if set == nil {
		return code
	}
	if *asJSON {
		out := policyCheckJSON(set)
		acc := policyCheckJSON(access)
		out.Access = &acc
		if !printJSON(e, cmdPolicyCheck.name, out) {
			return 1
		}
	} else {
		policyPrintCheck(e, set, "no policy files: the built-in default permits respond")
		fmt.Fprintf(e.stdout, "\naccess (%s):\n", policy.AccessDir)
		policyPrintCheck(e, access, "no access policy files: the built-in defaults decide run access (start: anyone; read, cancel, resolve: own runs; approve: others' runs)")
	}
	code = 0
	if set.Mode == policy.ModeDenyAll {
		for _, p := range set.Problems {
			fmt.Fprintln(e.stderr, cellText(p.String()))
		}
		fmt.Fprintf(e.stderr, "symbi policy check: deny_all: every response would be denied: %s\n", cellText(set.Reason))
		code = 1
	}
	if access.Mode == policy.ModeDenyAll {
		for _, p := range access.Problems {
			fmt.Fprintln(e.stderr, cellText(p.String()))
		}
		fmt.Fprintf(e.stderr, "symbi policy check: access deny_all: every run access would be denied: %s\n", cellText(access.Reason))
		code = 1
	}
	return code
}

// runPolicyEval runs symbi policy eval.
func runPolicyEval(e *env, args []string) int {
	fs := newFlags(e, cmdPolicyEval)
	dir := fs.String("project", ".", "the project `DIR`")
	agent := fs.String("agent", "", "the `AGENT`, by its file stem (required, except for the run actions)")
	caller := fs.String("caller", invoke.CallerStdio, "the `CALLER` the decision is made for (context.caller; the principal of access actions)")
	callerAuth := fs.String("caller-auth", "", "how the caller was authenticated: stdio, token, jwt or none (`METHOD`; default stdio for the caller stdio, none for anonymous, else token)")
	runOwner := fs.String("run-owner", invoke.CallerStdio, "run actions: the `CALLER` that started the run (resource.owner)")
	runAgent := fs.String("run-agent", "", "run actions: the run's agent, declared `NAME` (resource.agent)")
	runStatus := fs.String("run-status", "completed", "run actions: the run's `STATUS` (resource.status)")
	response := fs.String("response", "", "respond: the answer `TEXT`")
	responseFile := fs.String("response-file", "", "respond: read the answer text from `FILE`")
	action := fs.String("action", policy.ActionRespond, "the `ACTION`: respond, use_tool, or an access action: "+strings.Join(policy.AccessActions, ", "))
	tool := fs.String("tool", "", "use_tool: the tool `KIND` ("+strings.Join(policy.ToolKinds, ", ")+")")
	title := fs.String("title", "", "use_tool: the call's `TITLE`")
	var paths listFlag
	fs.Var(&paths, "path", "use_tool: a `PATH` the call names, relative to the workspace or absolute (repeatable)")
	workspace := fs.String("workspace", "", "use_tool: the workspace `DIR` (default: the project directory)")
	asJSON := fs.Bool("json", false, "print a JSON object instead of text")
	execFile := fs.String("executors", "", executorsUsage+" (a delegated agent is refused without it, as the server refuses it)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *callerAuth == "" {
		switch *caller {
		case auth.Stdio.ID:
			*callerAuth = auth.MethodStdio
		case auth.Anonymous.ID:
			*callerAuth = auth.MethodNone
		default:
			*callerAuth = auth.MethodToken
		}
	}
	// Only what the server can produce: another value would answer for a caller that
	// never exists.
	switch {
	case !slices.Contains([]string{auth.MethodStdio, auth.MethodToken, auth.MethodJWT, auth.MethodNone}, *callerAuth):
		fmt.Fprintf(e.stderr, "symbi policy eval: --caller-auth %q: want stdio, token, jwt or none\n", *callerAuth)
		return 2
	case !auth.ValidCallerID(*caller):
		fmt.Fprintf(e.stderr, "symbi policy eval: --caller %q is not a caller id (printable ASCII without quotes or backslashes, not starting with - or #)\n", *caller)
		return 2
	case set["run-owner"] && !auth.ValidCallerID(*runOwner):
		fmt.Fprintf(e.stderr, "symbi policy eval: --run-owner %q is not a caller id\n", *runOwner)
		return 2
	case (*caller == auth.Stdio.ID) != (*callerAuth == auth.MethodStdio), (*caller == auth.Anonymous.ID) != (*callerAuth == auth.MethodNone):
		fmt.Fprintf(e.stderr, "symbi policy eval: --caller %q with --caller-auth %s is no caller the server has: stdio is the caller over stdio, anonymous the one without authentication (none), any other id authenticated by token or jwt\n", *caller, *callerAuth)
		return 2
	case !slices.Contains(runs.Statuses, *runStatus):
		fmt.Fprintf(e.stderr, "symbi policy eval: --run-status %q: want one of %s\n", *runStatus, strings.Join(runs.Statuses, ", "))
		return 2
	}
	if slices.Contains(policy.AccessActions, *action) {
		return runAccessEval(e, set, fs.Args(), *dir, *execFile, *asJSON, policy.AccessRequest{Action: *action, Caller: *caller, CallerAuth: *callerAuth},
			*agent, &policy.RunResource{ID: policyDryRunID, Owner: *runOwner, Agent: *runAgent, Status: *runStatus})
	}
	useTool := *action == policy.ActionUseTool
	switch {
	case fs.NArg() != 0:
		fmt.Fprintf(e.stderr, "symbi policy eval: unexpected arguments %q\n", fs.Args())
		return 2
	case *agent == "":
		fmt.Fprintln(e.stderr, "symbi policy eval: --agent is required")
		return 2
	case *action != policy.ActionRespond && !useTool:
		fmt.Fprintf(e.stderr, "symbi policy eval: --action %q: want respond, use_tool or one of %s\n", *action, strings.Join(policy.AccessActions, ", "))
		return 2
	case set["run-owner"] || set["run-agent"] || set["run-status"]:
		fmt.Fprintln(e.stderr, "symbi policy eval: --run-owner, --run-agent and --run-status go with the run actions")
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
	// The executors file is read once the command line is known to be whole: a usage
	// error is said first, as for every other flag.
	opts, err := executorOptions(e, *execFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi policy eval: %s\n", errcode.Text(err))
		return 1
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
	if !useTool && !utf8.ValidString(text) {
		// The server never judges such a text: a model's answer that is not UTF-8 ends
		// its run inference_failed (docs/providers.md).
		fmt.Fprintf(e.stderr, "symbi policy eval: %s\n", errcode.Text(errcode.Errorf(errcode.InvalidRequest, "the answer is not valid UTF-8: no answer the server judges is")))
		return 1
	}
	p, reg, err := openRegistry(*dir, slog.New(slog.NewTextHandler(e.stderr, nil)), opts...)
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
		fmt.Fprintf(e.stderr, "symbi policy eval: policies unusable, every response is denied: %s\n", cellText(pol.Reason))
	}
	req := policy.NewRequest(a, policyDryRunID, text, policy.Surface, *caller)
	var pre *policy.Decision // the server's decision before any policy, for use_tool
	if useTool {
		ws := *workspace
		if ws == "" {
			ws = p.Path()
		}
		if abs, err := filepath.Abs(ws); err == nil {
			ws = abs
		}
		// The workspace as the server opens it: absolute, its links resolved; the paths
		// located in it as the server locates an agent's (acp.Locate).
		w, err := openDryRunWorkspace(ws, p.Path())
		if err != nil {
			what := "the workspace (the project directory)"
			if set["workspace"] {
				what = "--workspace"
			}
			fmt.Fprintf(e.stderr, "symbi policy eval: %s: %s\n", what, errcode.Text(err))
			return 1
		}
		l, err := acp.Locate(w, paths)
		if err != nil {
			w.Close()
			fmt.Fprintf(e.stderr, "symbi policy eval: --path: %s\n", errcode.Text(err))
			return 1
		}
		t := policy.ToolUse{Kind: *tool, Title: *title, Workspace: w.Path(), Paths: l.Paths, Outside: l.Outside}
		req = policy.NewToolRequest(a, policyDryRunID, policy.Surface, *caller, t)
		pre = acp.Predecide(w, t.Kind, l)
		w.Close()
	}
	req.CallerAuth = *callerAuth
	decision := pre
	if decision == nil {
		d := pol.Decide(req)
		decision = &d
	}
	out := policyEvalJSON(pol, req, *decision)
	if *asJSON {
		if !printJSON(e, cmdPolicyEval.name, out) {
			return 1
		}
		return 0
	}
	fmt.Fprintf(e.stdout, "decision: %s\n", out.Decision)
	if out.Gate != "" {
		fmt.Fprintf(e.stdout, "gate: %s (held for a person: approve_run decides)\n", nameText(out.Gate))
	}
	fmt.Fprintf(e.stdout, "action: %s\n", out.Action)
	if out.Tool != nil {
		fmt.Fprintf(e.stdout, "tool: %s, paths %s (top dirs %s), outside %s, workspace %s\n", out.Tool.Kind, policyList(out.Tool.Paths), policyList(out.Tool.TopDirs), policyList(out.Tool.Outside), out.Tool.Workspace)
	}
	fmt.Fprintf(e.stdout, "agent: %s (%s)\n", out.Agent, out.File)
	fmt.Fprintf(e.stdout, "mode: %s\n", out.Mode)
	fmt.Fprintf(e.stdout, "digest: %s\n", out.Digest)
	fmt.Fprintf(e.stdout, "policies: %s\n", policyList(out.Policies))
	fmt.Fprintf(e.stdout, "errors: %s\n", policyList(out.Errors))
	if len(out.Diagnostics) > 0 { // the text judged is the operator's own here
		fmt.Fprintf(e.stdout, "cedar says: %s\n", cellText(strings.Join(out.Diagnostics, "; ")))
	}
	fmt.Fprintf(e.stdout, "reason: %s\n", cellText(out.Reason))
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
	Tool     *policyToolJSON `json:"tool,omitempty"`
	Mode     policy.Mode     `json:"mode"`
	Digest   string          `json:"digest"`
	Policies []string        `json:"policies"`
	Errors   []string        `json:"errors"`
	// Diagnostics are Cedar's own messages of evaluation errors, which may quote the
	// values judged: shown here, to the operator who gave them, never journaled.
	Diagnostics []string `json:"diagnostics,omitempty"`
	Reason      string   `json:"reason"`
	Gate        string   `json:"gate,omitempty"` // a deny held for a person: the gating policies
	Agent       string   `json:"agent"`
	AgentID     string   `json:"agent_id"`
	File        string   `json:"file"`
	RunID       string   `json:"run_id"`
	Bytes       int      `json:"response_bytes"`
}

func policyEvalJSON(set *policy.Set, req policy.Request, d policy.Decision) policyEvalOutput {
	return policyEvalOutput{
		Decision: d.Verdict(), Action: req.Action, Tool: toolJSON(req.Tool), Mode: set.Mode, Digest: set.Digest,
		Policies: append([]string{}, d.Policies...), Errors: append([]string{}, d.Errors...), Diagnostics: d.Diagnostics, Reason: d.Reason, Gate: d.Gate,
		Agent: req.Agent, AgentID: req.AgentID, File: req.File, RunID: req.RunID, Bytes: len(req.Response),
	}
}

// policyToolJSON is the tool call a use_tool dry run judged, as --json prints it.
type policyToolJSON struct {
	Kind           string   `json:"kind"`
	Title          string   `json:"title"`
	Paths          []string `json:"paths"`
	TopDirs        []string `json:"top_dirs"`
	Outside        []string `json:"outside"`
	Workspace      string   `json:"workspace"`
	RawInputSHA256 string   `json:"raw_input_sha256,omitempty"`
}

func toolJSON(t *policy.ToolUse) *policyToolJSON {
	if t == nil {
		return nil
	}
	return &policyToolJSON{Kind: t.Kind, Title: t.Title, Paths: nonNilList(t.Paths), TopDirs: nonNilList(t.TopDirs()),
		Outside: nonNilList(t.Outside), Workspace: t.Workspace, RawInputSHA256: t.RawInputSHA256}
}

// policyRunJSON is the run an access dry run judged (the resource Run::"<run_id>"), as
// --json prints it.
type policyRunJSON struct {
	RunID  string `json:"run_id"`
	Owner  string `json:"owner"`
	Agent  string `json:"agent"`
	Status string `json:"status"`
}

func runJSON(r *policy.RunResource) *policyRunJSON {
	if r == nil {
		return nil
	}
	return &policyRunJSON{RunID: r.ID, Owner: r.Owner, Agent: r.Agent, Status: r.Status}
}

func nonNilList(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func policyList(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	names := make([]string, len(s))
	for i, id := range s {
		names[i] = nameText(id) // an @id with a line break prints no line of its own
	}
	return strings.Join(names, ", ")
}

// policyLoad pins the project directory and loads its policies and its access policies;
// on failure it reports on stderr and returns (nil, nil, 1).
func policyLoad(e *env, name, dir string) (*policy.Set, *policy.Set, int) {
	p, err := project.Open(dir)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi %s: %s\n", name, errcode.Text(err))
		return nil, nil, 1
	}
	defer p.Close()
	return policy.Load(p.Root()), policy.LoadAccess(p.Root()), 0
}

func policyPrintCheck(e *env, set *policy.Set, noFiles string) {
	fmt.Fprintf(e.stdout, "mode: %s\n", set.Mode)
	fmt.Fprintf(e.stdout, "digest: %s\n", set.Digest)
	if set.Mode == policy.ModeDefault {
		fmt.Fprintln(e.stdout, noFiles)
		return
	}
	byFile := map[string][]policy.Policy{}
	for _, p := range set.Policies() {
		byFile[p.File] = append(byFile[p.File], p)
	}
	// A file name or an @id with a line break prints no line of its own.
	for _, f := range set.Files {
		fmt.Fprintln(e.stdout, nameText(f))
		for _, p := range byFile[f] {
			effect := p.Effect
			if p.Gate != "" {
				effect += " @gate(" + p.Gate + ")"
			}
			fmt.Fprintf(e.stdout, "  %s %s (%d:%d)\n", effect, nameText(p.ID), p.Line, p.Column)
		}
	}
}

type policyEntryJSON struct {
	ID     string `json:"id"`
	Effect string `json:"effect"`
	Gate   string `json:"gate,omitempty"`
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
	// Access is the run-access set (policies/access), in the same form.
	Access *policyCheckOutput `json:"access,omitempty"`
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
		out.Files[i].Policies = append(out.Files[i].Policies, policyEntryJSON{ID: p.ID, Effect: p.Effect, Gate: p.Gate, Line: p.Line, Column: p.Column})
	}
	for _, p := range set.Problems {
		out.Problems = append(out.Problems, policyProblemJSON{File: p.File, Line: p.Line, Column: p.Column, Message: p.Message})
	}
	return out
}

// openDryRunWorkspace opens the workspace dir of a use_tool dry run as the server opens a
// run's: made absolute, its symbolic links resolved (workspace.Resolve), then pinned.
func openDryRunWorkspace(dir, project string) (*symbiws.Workspace, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	real, err := symbiws.Resolve(abs, []string{abs})
	if err != nil {
		return nil, err
	}
	return symbiws.Open(real, symbiws.Options{Project: project})
}

// runAccessEval dry-runs a run-access decision against the project's policies/access.
func runAccessEval(e *env, set map[string]bool, args []string, dir, execFile string, asJSON bool, req policy.AccessRequest, agent string, run *policy.RunResource) int {
	isStart := req.Action == policy.ActionStartRun
	switch {
	case len(args) != 0:
		fmt.Fprintf(e.stderr, "symbi policy eval: unexpected arguments %q\n", args)
		return 2
	case set["response"] || set["response-file"] || set["tool"] || set["title"] || set["path"] || set["workspace"]:
		fmt.Fprintf(e.stderr, "symbi policy eval: --response, --response-file, --tool, --title, --path and --workspace do not go with --action %s\n", req.Action)
		return 2
	case isStart && agent == "":
		fmt.Fprintln(e.stderr, "symbi policy eval: --agent is required with --action start_run")
		return 2
	case isStart && (set["run-owner"] || set["run-agent"] || set["run-status"]):
		fmt.Fprintln(e.stderr, "symbi policy eval: --run-owner, --run-agent and --run-status go with the run actions, not start_run")
		return 2
	case !isStart && set["agent"]:
		fmt.Fprintf(e.stderr, "symbi policy eval: --agent goes with start_run; name the run's agent with --run-agent\n")
		return 2
	case !isStart && set["executors"]:
		// No agent is resolved for a run action: the executors would change nothing.
		fmt.Fprintf(e.stderr, "symbi policy eval: --executors goes with start_run and the respond gate, not --action %s\n", req.Action)
		return 2
	}
	opts, err := executorOptions(e, execFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi policy eval: %s\n", errcode.Text(err))
		return 1
	}
	p, reg, err := openRegistry(dir, slog.New(slog.NewTextHandler(e.stderr, nil)), opts...)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi policy eval: %s\n", errcode.Text(err))
		return 1
	}
	defer p.Close()
	if isStart {
		a, err := reg.Resolve(agent)
		if err != nil {
			fmt.Fprintf(e.stderr, "symbi policy eval: %s\n", errcode.Text(err))
			return 1
		}
		req = policy.NewStartRequest(a, req.Caller, req.CallerAuth)
	} else {
		req.Run = run
	}
	set2 := policy.LoadAccess(p.Root())
	if set2.Mode == policy.ModeDenyAll {
		fmt.Fprintf(e.stderr, "symbi policy eval: access policies unusable, every access is denied: %s\n", cellText(set2.Reason))
	}
	d := set2.DecideAccess(req)
	out := accessEvalOutput{Decision: d.Verdict(), Action: req.Action, Caller: req.Caller, CallerAuth: req.CallerAuth, Agent: req.Agent, Run: runJSON(req.Run),
		Mode: set2.Mode, Digest: set2.Digest, Mentioned: set2.Mode == policy.ModeCedar && set2.Mentions(req.Action),
		Policies: append([]string{}, d.Policies...), Errors: append([]string{}, d.Errors...), Diagnostics: d.Diagnostics, Reason: d.Reason}
	if asJSON {
		if !printJSON(e, cmdPolicyEval.name, out) {
			return 1
		}
		return 0
	}
	fmt.Fprintf(e.stdout, "decision: %s\n", out.Decision)
	fmt.Fprintf(e.stdout, "action: %s\n", out.Action)
	fmt.Fprintf(e.stdout, "caller: %s (%s)\n", out.Caller, out.CallerAuth)
	if isStart {
		fmt.Fprintf(e.stdout, "agent: %s\n", out.Agent)
	} else {
		fmt.Fprintf(e.stdout, "run: owner %s, agent %q, status %s\n", nameText(run.Owner), run.Agent, run.Status)
	}
	fmt.Fprintf(e.stdout, "mode: %s\n", out.Mode)
	fmt.Fprintf(e.stdout, "digest: %s\n", out.Digest)
	fmt.Fprintf(e.stdout, "policies: %s\n", policyList(out.Policies))
	fmt.Fprintf(e.stdout, "errors: %s\n", policyList(out.Errors))
	if len(out.Diagnostics) > 0 { // the text judged is the operator's own here
		fmt.Fprintf(e.stdout, "cedar says: %s\n", cellText(strings.Join(out.Diagnostics, "; ")))
	}
	fmt.Fprintf(e.stdout, "reason: %s\n", cellText(out.Reason))
	return 0
}

type accessEvalOutput struct {
	Decision   string         `json:"decision"`
	Action     string         `json:"action"`
	Caller     string         `json:"caller"`
	CallerAuth string         `json:"caller_auth"`
	Agent      string         `json:"agent,omitempty"`
	Run        *policyRunJSON `json:"run,omitempty"`
	Mode       policy.Mode    `json:"mode"`
	Digest     string         `json:"digest"`
	Mentioned  bool           `json:"mentioned" jsonschema:"whether an access policy mentions the action (else the built-in default decided)"`
	Policies   []string       `json:"policies"`
	Errors     []string       `json:"errors"`
	// Diagnostics: as policyEvalOutput's.
	Diagnostics []string `json:"diagnostics,omitempty"`
	Reason      string   `json:"reason"`
}
