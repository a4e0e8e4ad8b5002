package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"symbi/internal/journal"
	"symbi/internal/loopback"
)

// rawClient speaks newline-delimited JSON-RPC to a server process, line by line.
type rawClient struct {
	p     *proc
	lines chan map[string]any
	bad   chan string // stdout lines that are not JSON objects
}

func newRawClient(p *proc) *rawClient {
	c := &rawClient{p: p, lines: make(chan map[string]any, 64), bad: make(chan string, 8)}
	go func() {
		defer close(c.lines)
		br := bufio.NewReaderSize(p.stdout, 1<<20)
		for {
			line, err := br.ReadBytes('\n')
			if len(strings.TrimSpace(string(line))) > 0 {
				var m map[string]any
				if json.Unmarshal(line, &m) != nil {
					select {
					case c.bad <- clip(string(line), 200):
					default:
					}
				} else {
					c.lines <- m
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return c
}

func (c *rawClient) send(line string) error {
	_, err := io.WriteString(c.p.stdin, line+"\n")
	return err
}

// recv waits up to 30 s for the message with the given id ("<nil>" for a null id),
// skipping notifications and other messages.
func (c *rawClient) recv(id string) (map[string]any, error) {
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m, ok := <-c.lines:
			if !ok {
				return nil, fmt.Errorf("the server closed stdout waiting for id %s (%s); stderr: %s", id, c.p.exitStatus(), c.p.stderr.tail())
			}
			if fmt.Sprint(m["id"]) == id {
				return m, nil
			}
		case l := <-c.bad:
			return nil, fmt.Errorf("stdout carried a non-JSON line %q", l)
		case <-timeout:
			return nil, fmt.Errorf("no answer with id %s within 30 s", id)
		}
	}
}

// initialize performs the MCP handshake at protocol 2025-11-25.
func (c *rawClient) initialize() error {
	if err := c.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`); err != nil {
		return err
	}
	if _, err := c.recv("init"); err != nil {
		return err
	}
	return c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// errorCode returns the JSON-RPC error code of m, or 0.
func errorCode(m map[string]any) int {
	e, _ := m["error"].(map[string]any)
	f, _ := e["code"].(float64)
	return int(f)
}

// toolError returns the text of a tool error result, or "" if m is not one.
func toolError(m map[string]any) string {
	r, _ := m["result"].(map[string]any)
	if r == nil || r["isError"] != true {
		return ""
	}
	c, _ := r["content"].([]any)
	if len(c) == 0 {
		return "(no content)"
	}
	first, _ := c[0].(map[string]any)
	s, _ := first["text"].(string)
	return s
}

// wireCase is one hostile line and how the server must answer it.
type wireCase struct {
	name string
	line string
	id   string // the id of the answer
	// exactly one of: a JSON-RPC error code, or a tool error code prefix
	rpcCode  int
	toolCode string
}

var wireCases = []wireCase{
	{name: "malformed JSON", line: `{"jsonrpc":"2.0","id":1,"method":`, id: "<nil>", rpcCode: -32700},
	{name: "not a message", line: `{}`, id: "<nil>", rpcCode: -32600},
	{name: "batch", line: `[{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`, id: "<nil>", rpcCode: -32600},
	{name: "binary garbage", line: "\x00\xff\xfe garbage", id: "<nil>", rpcCode: -32700},
	{name: "message over 16 MiB", line: `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"pad":"` + strings.Repeat("x", 17<<20) + `"}}`, id: "<nil>", rpcCode: -32600},
	{name: "unknown method", line: `{"jsonrpc":"2.0","id":4,"method":"no/such/method","params":{}}`, id: "4", rpcCode: -32601},
	{name: "unknown tool", line: `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}`, id: "5", rpcCode: -32602},
	{name: "arguments of the wrong type", line: `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"invoke_agent","arguments":{"agent":["x"],"prompt":"hi"}}}`, id: "6", toolCode: "invalid_request"},
	{name: "missing arguments", line: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"invoke_agent","arguments":{}}}`, id: "7", toolCode: "invalid_request"},
	{name: "unknown argument", line: `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"invoke_agent","arguments":{"agent":"helper","prompt":"hi","x":1}}}`, id: "8", toolCode: "invalid_request"},
	{name: "arguments not an object", line: `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"list_agents","arguments":"all"}}`, id: "9", toolCode: "invalid_request"},
	{name: "prompt over 64 KiB", line: `{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"invoke_agent","arguments":{"agent":"helper","prompt":"` + strings.Repeat("p", 64<<10+1) + `"}}}`, id: "10", toolCode: "limit_exceeded"},
}

// runClient sends hostile lines to a server over raw stdio, then leaves calls in flight
// against a hanging model in two ways: a cancellation notification (the server must keep
// serving) and a client that goes away (both pipes closed). Each bad line gets its clear
// error, the server never crashes, and every run ends with terminated (reason cancelled)
// in a journal that verifies complete.
func runClient(ctx context.Context, h *harnessRun, r *result) {
	dir, err := h.newProject("client")
	if err != nil {
		r.failf("project: %v", err)
		return
	}
	arrived := make(chan struct{}, 16)
	model, err := startModel(loopback.WithReply(loopback.Reply{Fault: loopback.FaultHang}))
	if err != nil {
		r.failf("model: %v", err)
		return
	}
	defer model.Close()
	model.OnRequest(func(loopback.Request) { arrived <- struct{}{} })
	env := modelEnv(model.URL())
	var peak int64

	// Hostile lines, then a cancelled call, on one server.
	p, err := h.startProc(h.bin, dir, env, procOptions{})
	if err != nil {
		r.failf("start: %v", err)
		return
	}
	c := newRawClient(p)
	if err := c.initialize(); err != nil {
		p.kill()
		r.failf("initialize: %v", err)
		return
	}
	for _, wc := range wireCases {
		if err := c.send(wc.line); err != nil {
			r.failf("%s: write: %v", wc.name, err)
			break
		}
		m, err := c.recv(wc.id)
		switch {
		case err != nil:
			r.failf("%s: %v", wc.name, err)
		case wc.rpcCode != 0 && errorCode(m) != wc.rpcCode:
			r.failf("%s: answered %s, want JSON-RPC error %d", wc.name, clip(fmt.Sprint(m), 300), wc.rpcCode)
		case wc.toolCode != "" && !strings.HasPrefix(toolError(m), wc.toolCode+": "):
			r.failf("%s: answered %s, want tool error %s", wc.name, clip(fmt.Sprint(m), 300), wc.toolCode)
		}
		if err != nil {
			break
		}
	}
	if err := c.send(`{"jsonrpc":"2.0","id":"call","method":"tools/call","params":{"name":"invoke_agent","arguments":{"agent":"helper","prompt":"hang"}}}`); err != nil {
		r.failf("cancelled call: write: %v", err)
	} else if h.awaitRequest(arrived) {
		c.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"call","reason":"stress"}}`)
		if err := awaitTerminated(dir, 1, "cancelled"); err != nil {
			r.failf("cancelled call: %v", err)
		}
	} else {
		r.failf("cancelled call: the model never received the request")
	}
	if err := c.send(`{"jsonrpc":"2.0","id":"list","method":"tools/list","params":{}}`); err != nil {
		r.failf("after the hostile lines: write: %v", err)
	} else if m, err := c.recv("list"); err != nil {
		r.failf("after the hostile lines: %v", err)
	} else if tools, _ := m["result"].(map[string]any)["tools"].([]any); len(tools) == 0 {
		r.failf("after the hostile lines, tools/list answered %s", clip(fmt.Sprint(m), 200))
	}
	peak = max(peak, p.peakRSS())
	if !p.stop(nil) {
		r.failf("the server did not exit when its input closed")
	} else if st := p.exitStatus(); st != "exit 0" {
		r.failf("the server ended with %s after the hostile lines; stderr: %s", st, p.stderr.tail())
	}

	// A client that goes away with a call in flight: both pipes close.
	p, err = h.startProc(h.bin, dir, env, procOptions{})
	if err != nil {
		r.failf("start: %v", err)
		return
	}
	c = newRawClient(p)
	if err := c.initialize(); err != nil {
		p.kill()
		r.failf("initialize: %v", err)
		return
	}
	if err := c.send(`{"jsonrpc":"2.0","id":"gone","method":"tools/call","params":{"name":"invoke_agent","arguments":{"agent":"helper","prompt":"hang and go"}}}`); err != nil {
		r.failf("client gone: write: %v", err)
	}
	if !h.awaitRequest(arrived) {
		r.failf("client gone: the model never received the request")
	}
	peak = max(peak, p.peakRSS())
	p.stdin.Close()
	p.stdout.Close()
	if !p.waitExit(30 * time.Second) {
		p.kill()
		r.failf("client gone: the server did not exit within 30 s of losing its client")
	}
	goneStatus := p.exitStatus()
	if err := awaitTerminated(dir, 2, "cancelled"); err != nil {
		r.failf("client gone (server %s): %v; stderr: %s", goneStatus, err, p.stderr.tail())
	}
	r.figure("hostile_lines", len(wireCases))
	r.figure("gone_client_exit", strings.ReplaceAll(goneStatus, " ", "_"))
	r.figure("peak_rss", mib(peak))
}

// awaitRequest waits up to 30 s for the model to receive a request.
func (h *harnessRun) awaitRequest(arrived <-chan struct{}) bool {
	select {
	case <-arrived:
		return true
	case <-time.After(30 * time.Second):
		return false
	}
}

// awaitTerminated waits up to 30 s until the project has n journals, all complete with
// the given terminal reason and nothing released.
func awaitTerminated(dir string, n int, reason string) error {
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		files, _ := filepath.Glob(filepath.Join(governed(dir), "*.jsonl"))
		pub, err := projectKey(dir)
		if len(files) == n && err == nil {
			done := true
			for _, f := range files {
				rep := journal.Verify(f, pub, journal.VerifyOptions{})
				if rep.ExitCode() == 1 {
					return fmt.Errorf("journal %s is invalid: %v", filepath.Base(f), rep.Problems)
				}
				if rep.ExitCode() != 0 || rep.TerminalReason != reason || rep.Released {
					done = false
					last = fmt.Sprintf("journal %s: status %s, terminal %q, released %v", filepath.Base(f), rep.Status, rep.TerminalReason, rep.Released)
				}
			}
			if done {
				return nil
			}
		} else {
			last = fmt.Sprintf("%d journals (key: %v), want %d", len(files), err, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("after 30 s: %s", last)
}
