package mcpserver_test

import (
	"encoding/json"
	"testing"
)

// A refused definition still returns its source (get_agent_dsl is an authoring tool).
func TestGetAgentDSLRefusedDefinition(t *testing.T) {
	cs := serve(t, testProject(t, nil), serveOpts{})
	for _, tt := range []struct{ agent, file string }{
		{"refused", "agents/refused.symbi"},
		{"broken", "agents/broken.symbi"},
	} {
		t.Run(tt.agent, func(t *testing.T) {
			res := call(t, cs, "get_agent_dsl", map[string]any{"agent": tt.agent})
			if res.IsError {
				t.Fatalf("error %s; want the source of %s", textOf(t, res), tt.file)
			}
			if got := textOf(t, res); got != testAgents[tt.file] {
				t.Fatalf("text %q, want %q", got, testAgents[tt.file])
			}
		})
	}
}

// Argument names are matched exactly and only once: encoding/json folds case and lets
// the last duplicate win, so {"agent":"helper","Agent":"x"} would select "x".
func TestStrictArgumentNames(t *testing.T) {
	cs := serve(t, testProject(t, nil), serveOpts{})
	for _, args := range []string{
		`{"agent":"helper","Agent":"x"}`,
		`{"AGENT":"helper"}`,
		`{"agent":"helper","agent":"x"}`,
	} {
		t.Run(args, func(t *testing.T) {
			wantToolError(t, call(t, cs, "get_agent_dsl", json.RawMessage(args)), "invalid_request")
		})
	}
}

// A line that decodes as a JSON-RPC response with neither result nor error is not one
// well-formed message; NewStdioTransport's contract says it is answered with an error.
func TestTransportRejectsEmptyResponse(t *testing.T) {
	w := startWire(t, testProject(t, nil))
	w.initialize(t)
	w.send(t, `{"jsonrpc":"2.0","id":3}`)
	r := w.next(t)
	if r.Error == nil || r.Error.Code != -32600 || string(r.ID) != "3" {
		t.Fatalf("got id %s error %+v result %.200s; want id 3 code -32600", r.ID, r.Error, r.Result)
	}
	w.listAgents(t, 4)
}
