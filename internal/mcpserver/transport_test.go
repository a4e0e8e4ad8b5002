package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"symbi/internal/syncbuf"
	"testing"
	"testing/iotest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/invoke"
	"symbi/internal/mcpserver"
	"symbi/internal/policy"
	"symbi/internal/project"
	"symbi/internal/runs"
	"symbi/internal/schemapin"
)

// wire is a raw JSON-RPC connection to a server running on mcpserver.NewStdioTransport
// over pipes: the test writes lines to the server's stdin and reads its stdout.
type wire struct {
	in    *io.PipeWriter
	lines chan string
	done  chan error // the server's Run result
}

func startWire(t *testing.T, dir string) *wire {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	p, err := project.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	reg, err := p.LoadRegistry(log)
	if err != nil {
		t.Fatal(err)
	}
	runner := invoke.New(invoke.Config{Project: p, Registry: reg, Policies: policy.Load(p.Root()), Log: log})
	srv := mcpserver.New(mcpserver.Config{Project: p, Registry: reg, Runs: runs.New(runs.Config{Root: p.Root(), Runner: runner, Registry: reg}), Schemas: schemapin.NewVerifier(func(string) string { return "" }), Log: log})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	w := &wire{in: inW, lines: make(chan string, 16), done: make(chan error, 1)}
	go func() {
		w.done <- srv.Run(context.Background(), mcpserver.NewStdioTransport(inR, outW))
		outW.Close()
	}()
	go func() {
		r := bufio.NewReaderSize(outR, 1<<20)
		for {
			line, err := r.ReadString('\n')
			if line != "" {
				w.lines <- line
			}
			if err != nil {
				close(w.lines)
				return
			}
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-w.done:
		case <-time.After(hangGuard):
			t.Error("server did not stop after its input closed")
		}
		for range w.lines {
		}
	})
	return w
}

func (w *wire) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(w.in, line+"\n"); err != nil {
		t.Fatalf("writing to the server: %v", err)
	}
}

// response is one JSON-RPC response line.
type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// next reads the next line of stdout, which must be one JSON-RPC 2.0 message.
func (w *wire) next(t *testing.T) response {
	t.Helper()
	select {
	case line, ok := <-w.lines:
		if !ok {
			t.Fatal("stdout closed")
		}
		if !strings.HasSuffix(line, "\n") {
			t.Fatalf("stdout line without newline: %.200q", line)
		}
		var r response
		dec := json.NewDecoder(strings.NewReader(line))
		if err := dec.Decode(&r); err != nil || dec.More() || r.JSONRPC != "2.0" {
			t.Fatalf("stdout carries a line that is not one JSON-RPC 2.0 message: %.200q (%v)", line, err)
		}
		return r
	case <-time.After(hangGuard):
		t.Fatalf("no answer within %v", hangGuard)
	}
	panic("unreachable")
}

func (w *wire) initialize(t *testing.T) {
	t.Helper()
	w.send(t, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wire-test","version":"1"}}}`)
	if r := w.next(t); r.Error != nil || string(r.ID) != `"init"` || len(r.Result) == 0 {
		t.Fatalf("initialize: %+v", r)
	}
	w.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// listAgents calls list_agents with id and requires its result: the session still serves.
func (w *wire) listAgents(t *testing.T, id int) {
	t.Helper()
	w.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"list_agents","arguments":{}}}`, id))
	r := w.next(t)
	if r.Error != nil || string(r.ID) != fmt.Sprint(id) || !strings.Contains(string(r.Result), `"name":"helper"`) {
		t.Fatalf("list_agents after a rejected line: id %s error %+v result %.200s", r.ID, r.Error, r.Result)
	}
}

// TestTransportScreening sends lines that are not one JSON-RPC message and requires a
// JSON-RPC error for each, with the session serving the next request.
func TestTransportScreening(t *testing.T) {
	w := startWire(t, testProject(t, nil))
	w.initialize(t)
	// A line of exactly MaxMessageBytes: valid JSON-RPC, so it reaches parse_dsl, whose
	// own 1 MiB limit answers.
	const prefix = `{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"name":"parse_dsl","arguments":{"content":"`
	const suffix = `"}}}`
	atLimit := prefix + strings.Repeat("#", mcpserver.MaxMessageBytes-len(prefix)-len(suffix)) + suffix
	overLimit := prefix + strings.Repeat("#", mcpserver.MaxMessageBytes+1-len(prefix)-len(suffix)) + suffix
	tests := []struct {
		name string
		line string
		id   string // the id of the error response
		code int
		msg  string
	}{
		{"malformed JSON", `{"jsonrpc":"2.0","id":1,"method":`, "null", -32700, "not valid JSON"},
		{"not JSON at all", `hello`, "null", -32700, "not valid JSON"},
		// JSON's white space is space, tab, CR and LF alone (RFC 8259): other spaces around
		// the text make the line no JSON text, not a padded one.
		{"a no-break space before", "\u00a0{\"jsonrpc\":\"2.0\",\"id\":30,\"method\":\"ping\"}", "null", -32700, "not valid JSON"},
		{"a next-line after", "{\"jsonrpc\":\"2.0\",\"id\":31,\"method\":\"ping\"}\u0085", "null", -32700, "not valid JSON"},
		{"a vertical tab before", "\v{\"jsonrpc\":\"2.0\",\"id\":32,\"method\":\"ping\"}", "null", -32700, "not valid JSON"},
		{"empty object", `{}`, "null", -32600, "invalid request"},
		{"batch", `[{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`, "null", -32600, "batches are not supported"},
		{"empty batch", `[]`, "null", -32600, "batches are not supported"},
		{"scalar", `42`, "null", -32600, "invalid request"},
		{"method not a string, string id", `{"jsonrpc":"2.0","id":"abc","method":5}`, `"abc"`, -32600, "invalid request"},
		{"no version tag, number id", `{"id":3,"method":"tools/list"}`, "3", -32600, "invalid request"},
		{"over the limit", overLimit, "null", -32600, "exceeds 16777216 bytes"},
		{"repeated tool name", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"list_agents","name":"invoke_agent","arguments":{"agent":"helper","prompt":"x"}}}`,
			"7", -32600, `member "name" appears twice in the object at $.params`},
		{"repeated id", `{"jsonrpc":"2.0","id":8,"id":9,"method":"tools/list"}`, "null", -32600, `member "id" appears twice in the object at $`},
		{"repeated method", `{"jsonrpc":"2.0","id":10,"method":"tools/list","method":"tools/call"}`, "10", -32600, `member "method" appears twice`},
		{"nested repeat before a repeated id", `{"jsonrpc":"2.0","params":{"a":1,"a":2},"id":12,"id":13,"method":"tools/list"}`, "null", -32600, `member "a" appears twice`},
		// Text the SDK would read otherwise than it was sent, or not at all.
		{"not UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":20,\"method\":\"tools/call\",\"params\":{\"name\":\"invoke_agent\",\"arguments\":{\"agent\":\"helper\",\"prompt\":\"UTF\xff\xfeX\"}}}", "null", -32700, "not valid UTF-8"},
		{"a lone surrogate", `{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"invoke_agent","arguments":{"agent":"helper","prompt":"A\ud800B"}}}`, "21", -32600, "escaped lone surrogate"},
		{"a surrogate pair is text", `{"jsonrpc":"2.0","id":22,"method":"tools/call","params":{"name":"no_such_tool","arguments":{"x":"\ud83d\ude00"}}}`, "22", -32602, "no_such_tool"},
		{"nested too deep", `{"jsonrpc":"2.0","id":23,"method":"ping","params":{"_meta":{"x":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}}}`, "null", -32600, "nested more than 1000 levels"},
		{"nested past json.Valid", `{"jsonrpc":"2.0","id":24,"method":"ping","params":{"_meta":{"x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}}}`, "null", -32600, "nested more than 1000 levels"},
		{"a fractional id", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, "null", -32600, "id 1.5 cannot be answered exactly"},
		{"an id past 2^53", `{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}`, "null", -32600, "cannot be answered exactly"},
		{"an id past int64", `{"jsonrpc":"2.0","id":99999999999999999999,"method":"ping"}`, "null", -32600, "cannot be answered exactly"},
		{"an exponent id", `{"jsonrpc":"2.0","id":1e2,"method":"ping"}`, "null", -32600, "cannot be answered exactly"},
		{"a request with a null id", `{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"list_agents","arguments":{}}}`, "null", -32600, "never null"},
		{"a negative zero id", `{"jsonrpc":"2.0","id":-0,"method":"ping"}`, "null", -32600, "id -0 cannot be answered exactly"},
		{"an id in another case", `{"jsonrpc":"2.0","ID":7,"method":"ping"}`, "null", -32600, `member "ID" is "id" spelled otherwise`},
		{"an id and an id in another case", `{"jsonrpc":"2.0","id":5,"ID":6,"method":"ping"}`, "5", -32600, `member "ID" is "id" spelled otherwise`},
		{"a fractional id hidden by another case", `{"jsonrpc":"2.0","id":1.5,"ID":7,"method":"ping"}`, "null", -32600, "id 1.5 cannot be answered exactly"},
		{"a method in another case", `{"jsonrpc":"2.0","id":25,"Method":"tools/list","method":"ping"}`, "25", -32600, `member "Method" is "method" spelled otherwise`},
		{"a long name twice", `{"jsonrpc":"2.0","id":26,"method":"ping","params":{"` + strings.Repeat("n", 100000) + `":1,"` + strings.Repeat("n", 100000) + `":2}}`, "26", -32600, "…(100000 bytes in all) appears twice"},
		{"a boolean id", `{"jsonrpc":"2.0","id":true,"method":"ping"}`, "null", -32600, "an id is a string or an integer"},
		{"repeated argument deep inside", `{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"verify_schema","arguments":{"schema":"{}"},"_meta":{"a":[{"k":1,"k":2}]}}}`,
			"11", -32600, `member "k" appears twice in the object at $.params._meta.a[0]`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w.send(t, tt.line)
			r := w.next(t)
			if r.Error == nil || r.Error.Code != tt.code || string(r.ID) != tt.id || !strings.Contains(r.Error.Message, tt.msg) {
				t.Fatalf("got id %s error %+v result %.200s; want id %s code %d message containing %q", r.ID, r.Error, r.Result, tt.id, tt.code, tt.msg)
			}
			w.listAgents(t, 100+i)
		})
	}
	t.Run("the largest exact id", func(t *testing.T) {
		w.send(t, `{"jsonrpc":"2.0","id":-9007199254740991,"method":"ping"}`)
		if r := w.next(t); r.Error != nil || string(r.ID) != "-9007199254740991" {
			t.Fatalf("ping with id -(2^53 - 1): id %s error %+v", r.ID, r.Error)
		}
	})
	t.Run("blank lines are skipped", func(t *testing.T) {
		w.send(t, "")
		w.send(t, "   \t")
		w.listAgents(t, 200)
	})
	t.Run("at the limit", func(t *testing.T) {
		w.send(t, atLimit)
		r := w.next(t)
		if r.Error != nil || string(r.ID) != `"big"` {
			t.Fatalf("a line of exactly %d bytes was refused: id %s error %+v", mcpserver.MaxMessageBytes, r.ID, r.Error)
		}
		var res struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		if err := json.Unmarshal(r.Result, &res); err != nil || !res.IsError || len(res.Content) != 1 || !strings.HasPrefix(res.Content[0].Text, "limit_exceeded: ") {
			t.Fatalf("result %.300s (%v); want the parse_dsl limit_exceeded tool error", r.Result, err)
		}
		w.listAgents(t, 201)
	})
}

// TestWatchReads: every byte passes; ended is called once, with the read's error, at the
// first failed read — io.EOF at the end of the input, another error as it is.
func TestWatchReads(t *testing.T) {
	for _, c := range []struct {
		name string
		in   io.Reader
		want error
	}{
		{"end of input", strings.NewReader("line one\nline two\n"), io.EOF},
		{"read error", iotest.ErrReader(errBroken), errBroken},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ended []error
			r := mcpserver.WatchReads(c.in, func(err error) { ended = append(ended, err) })
			b, err := io.ReadAll(r)
			if err != nil && !errors.Is(err, c.want) {
				t.Fatalf("ReadAll: %v", err)
			}
			if c.want == io.EOF && string(b) != "line one\nline two\n" {
				t.Fatalf("read %q", b)
			}
			if _, err := r.Read(make([]byte, 1)); !errors.Is(err, c.want) {
				t.Fatalf("a read after the end: %v, want %v", err, c.want)
			}
			if len(ended) != 1 || !errors.Is(ended[0], c.want) {
				t.Fatalf("ended called with %v, want once with %v", ended, c.want)
			}
		})
	}
}

var errBroken = errors.New("broken pipe")

// TestIDInFlight: a request whose id is that of a request still in flight is refused
// (the SDK would answer nothing: it takes it for a notification), and so is its id in a
// refusal, which would seem to answer the request in flight; once answered, an id may be
// used again.
func TestIDInFlight(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	tr := mcpserver.NewStdioTransport(inR, outW).(*mcp.IOTransport)
	t.Cleanup(func() { inW.Close(); outR.Close() })
	sdk := bufio.NewReader(tr.Reader)
	out := make(chan string, 16)
	go func() {
		r := bufio.NewReader(outR)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				close(out)
				return
			}
			out <- line
		}
	}()
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	passes := func(line string) {
		t.Helper()
		send(line)
		got, err := sdk.ReadString('\n')
		if err != nil || got != line+"\n" {
			t.Fatalf("the SDK read %q (%v), want %q", got, err, line)
		}
	}
	refused := func(line, id, msg string) {
		t.Helper()
		send(line)
		var r response
		select {
		case l := <-out:
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatal(err)
			}
		case <-time.After(hangGuard):
			t.Fatalf("no answer to %s", line)
		}
		if r.Error == nil || r.Error.Code != -32600 || string(r.ID) != id || !strings.Contains(r.Error.Message, msg) {
			t.Fatalf("%s: id %s error %+v; want id %s and %q", line, r.ID, r.Error, id, msg)
		}
	}
	refused(`{"jsonrpc":"2.0","ID":5,"method":"ping"}`, "null", "spelled otherwise") // not recorded as in flight
	passes(`{"jsonrpc":"2.0","id":5,"method":"ping"}`)
	refused(`{"jsonrpc":"2.0","id":5,"method":"tools/list"}`, "null", "id 5 is already the id of a request in flight")
	passes(`{"jsonrpc":"2.0","id":"5","method":"ping"}`) // a string is another id
	refused(`{"jsonrpc":"2.0","id":"5","method":"ping"}`, "null", `id "5" is already`)
	refused(`{"jsonrpc":"2.0","id":5,"method":"ping","a":1,"a":2}`, "null", `member "a" appears twice`)
	refused(`{"jsonrpc":"2.0","id":6,"method":"ping","a":1,"a":2}`, "6", `member "a" appears twice`) // 6 is not in flight
	passes(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":5,"progress":1}}`)
	if _, err := tr.Writer.Write([]byte(`{"jsonrpc":"2.0","id":5,"result":{}}` + "\n")); err != nil { // the SDK answers 5
		t.Fatal(err)
	}
	if l := <-out; !strings.Contains(l, `"id":5`) {
		t.Fatalf("the answer to 5: %q", l)
	}
	passes(`{"jsonrpc":"2.0","id":5,"method":"tools/list"}`)
	refused(`{"jsonrpc":"2.0","id":"5","method":"ping"}`, "null", `id "5" is already`) // still in flight
	// An answer whose members come in another order ends its flight too.
	if _, err := tr.Writer.Write([]byte(`{"result":{"big":[1,2,3]},"jsonrpc":"2.0","id":5}` + "\n")); err != nil {
		t.Fatal(err)
	}
	<-out
	passes(`{"jsonrpc":"2.0","id":5,"method":"ping"}`)
}

// TestLineOverLimitAtEOF: the last line of stdin, without its newline, is held to the
// same limit as any other: a message one byte over 16 MiB is refused with -32600 "message
// exceeds 16777216 bytes (16 MiB); skipped" (docs/errors.md), not passed to the SDK.
func TestLineOverLimitAtEOF(t *testing.T) {
	const prefix = `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"pad":"`
	const suffix = `"}}}`
	line := prefix + strings.Repeat("x", mcpserver.MaxMessageBytes+1-len(prefix)-len(suffix)) + suffix
	if len(line) != mcpserver.MaxMessageBytes+1 {
		t.Fatalf("built a line of %d bytes", len(line))
	}
	var out syncbuf.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	conn, err := mcpserver.NewStdioTransport(strings.NewReader(line), &out).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msg, err := conn.Read(ctx)
	if err == nil {
		t.Errorf("a %d-byte line (no newline, at EOF) reached the SDK as %T; want it refused as over %d bytes", len(line), msg, mcpserver.MaxMessageBytes)
	} else if !errors.Is(err, io.EOF) {
		t.Logf("read: %v", err)
	}
	if !strings.Contains(out.String(), "exceeds 16777216 bytes") {
		t.Errorf("stdout %.200q; want the -32600 'message exceeds 16777216 bytes' refusal", out.String())
	}
}

// TestProgressTokenExact: a progress token the server cannot echo exactly — a number the
// SDK would read through a float64 (2^53 + 1), or not a string or an integer — is refused
// with -32600, as such an id is: every notifications/progress would otherwise carry a
// token the client never sent. A string or an exact integer token is taken.
func TestProgressTokenExact(t *testing.T) {
	w := startWire(t, testProject(t, nil))
	w.initialize(t)
	call := func(id int, token string) response {
		t.Helper()
		w.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"list_agents","arguments":{},"_meta":{"progressToken":%s}}}`, id, token))
		for {
			if r := w.next(t); string(r.ID) == strconv.Itoa(id) {
				return r
			}
		}
	}
	for i, token := range []string{"9007199254740993", "1.5", "true", "{}"} {
		r := call(10+i, token)
		if r.Error == nil || r.Error.Code != -32600 || !strings.Contains(r.Error.Message, "progress token") {
			t.Errorf("progress token %s: %+v, want -32600 naming the progress token", token, r.Error)
		}
	}
	for i, token := range []string{"7", `"p-1"`, "-9007199254740991"} {
		if r := call(20+i, token); r.Error != nil {
			t.Errorf("progress token %s refused: %+v", token, r.Error)
		}
	}
}

// TestProgressTokenExactEscaped: the progress token is found as the SDK finds it, whatever
// the spelling of its member's name: "progress\u0054oken", or _meta written
// "\u005fmeta", is that member, and a token the server cannot echo exactly is refused
// the same (the check looked for the bytes "progressToken" and let these through).
func TestProgressTokenExactEscaped(t *testing.T) {
	w := startWire(t, testProject(t, nil))
	w.initialize(t)
	id := 100
	for _, form := range []string{`"_meta":{"%s":%s}`, `"\u005fmeta":{"%s":%s}`} {
		for _, name := range []string{`progressToken`, `progress\u0054oken`, `\u0070rogressToken`} {
			for _, token := range []string{"9007199254740993", "1.5", "true"} {
				id++
				meta := fmt.Sprintf(form, name, token)
				w.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"list_agents","arguments":{},%s}}`, id, meta))
				var r response
				for r = w.next(t); string(r.ID) != strconv.Itoa(id); r = w.next(t) {
				}
				if r.Error == nil || r.Error.Code != -32600 || !strings.Contains(r.Error.Message, "progress token") {
					t.Errorf("%s: error %+v, want -32600 naming the progress token", meta, r.Error)
				}
			}
		}
	}
}

// TestUnknownMethodClippedStdio: a JSON-RPC error's message is at most MaxErrorMessage
// bytes also when the SDK refuses an unknown method over stdio before any middleware runs,
// quoting its name whole (over HTTP, methodNotFound quotes it with errcode.Quote): the
// transport cuts the error line it writes. The session goes on.
func TestUnknownMethodClippedStdio(t *testing.T) {
	w := startWire(t, testProject(t, nil))
	w.initialize(t)
	long := strings.Repeat("x", 100000)
	w.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":%q,"params":{}}`, long))
	r := w.next(t)
	if r.Error == nil {
		t.Fatalf("an unknown method was not refused: %+v", r)
	}
	if len(r.Error.Message) > mcpserver.MaxErrorMessage || r.Error.Code != -32601 || !strings.Contains(r.Error.Message, "(100") {
		t.Errorf("unknown method over stdio: code %d, a message of %d bytes (> %d): %.80s…", r.Error.Code, len(r.Error.Message), mcpserver.MaxErrorMessage, r.Error.Message)
	}
	w.listAgents(t, 8)
}

// TestUnknownMethodClippedLongID: the error line is cut whatever the length of the id
// before its "error" member (a check that looked for "error" in the line's first bytes
// passed a 5,000-byte id's answer on whole).
func TestUnknownMethodClippedLongID(t *testing.T) {
	w := startWire(t, testProject(t, nil))
	w.initialize(t)
	id := strings.Repeat("i", 5000)
	w.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":%q,"params":{}}`, id, strings.Repeat("x", 100000)))
	r := w.next(t)
	if r.Error == nil || string(r.ID) != strconv.Quote(id) {
		t.Fatalf("an unknown method with a long id was not refused under its id: %.80s %+v", r.ID, r.Error)
	}
	if len(r.Error.Message) > mcpserver.MaxErrorMessage || r.Error.Code != -32601 {
		t.Errorf("unknown method, 5,000-byte id: code %d, a message of %d bytes (> %d)", r.Error.Code, len(r.Error.Message), mcpserver.MaxErrorMessage)
	}
	w.listAgents(t, 8)
}

// TestResourceNotFoundDataClipped: the SDK's "Resource not found" carries the URI asked
// for in its data, whole; a URI of 100,000 bytes, of a run or of nothing served, is
// answered with data of at most MaxErrorMessage bytes, the URI cut and its length said.
// The session goes on.
func TestResourceNotFoundDataClipped(t *testing.T) {
	w := startWire(t, testProject(t, nil))
	w.initialize(t)
	for i, uri := range []string{mcpserver.RunURIPrefix + strings.Repeat("r", 100000), "file:///" + strings.Repeat("f", 100000)} {
		w.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"resources/read","params":{"uri":%q}}`, 20+i, uri))
		r := w.next(t)
		if r.Error == nil || r.Error.Code != -32602 {
			t.Fatalf("%.30s…: %+v; want the SDK's resource not found (-32602)", uri, r.Error)
		}
		var data struct{ URI string }
		if err := json.Unmarshal(r.Error.Data, &data); err != nil || len(r.Error.Data) > mcpserver.MaxErrorMessage {
			t.Fatalf("%.30s…: data of %d bytes (> %d?) %.100s: %v", uri, len(r.Error.Data), mcpserver.MaxErrorMessage, r.Error.Data, err)
		}
		if !strings.HasPrefix(uri, strings.TrimSuffix(data.URI, fmt.Sprintf("…(%d bytes in all)", len(uri)))) || !strings.HasSuffix(data.URI, fmt.Sprintf("…(%d bytes in all)", len(uri))) {
			t.Errorf("%.30s…: data.uri %.300q; want its head, its length said", uri, data.URI)
		}
	}
	w.listAgents(t, 30)
}

// versionTagLine is a request whose "jsonrpc" member is 100,000 bytes: the SDK's
// DecodeMessage refuses it with `invalid message version tag %q`, which the transport's
// screening (check) passes on whole as "invalid request: …".
func versionTagLine(id int) string {
	return fmt.Sprintf(`{"jsonrpc":%q,"id":%d,"method":"ping"}`, strings.Repeat("v", 100000), id)
}

// TestVersionTagClippedStdio: the same rule, for a line the stdio transport
// itself refuses.
func TestVersionTagClippedStdio(t *testing.T) {
	w := startWire(t, testProject(t, nil))
	w.initialize(t)
	w.send(t, versionTagLine(9))
	r := w.next(t)
	if r.Error == nil {
		t.Fatalf("not refused: %+v", r)
	}
	if len(r.Error.Message) > mcpserver.MaxErrorMessage {
		t.Errorf("a 100,000-byte jsonrpc member over stdio: code %d, a message of %d bytes (> %d): %.80s…", r.Error.Code, len(r.Error.Message), mcpserver.MaxErrorMessage, r.Error.Message)
	}
	w.listAgents(t, 10)
}

// TestVersionTagClippedHTTP: the same line as an HTTP POST body (screenHTTP
// shares check).
func TestVersionTagClippedHTTP(t *testing.T) {
	url, cs := bareHTTPSession(t, mcpserver.HTTPOptions{})
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(versionTagLine(11)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var r response
	if err := json.Unmarshal(body, &r); err != nil || r.Error == nil {
		t.Fatalf("%s: %.200s (%v); want a JSON-RPC error", res.Status, body, err)
	}
	if len(r.Error.Message) > mcpserver.MaxErrorMessage {
		t.Errorf("a 100,000-byte jsonrpc member over HTTP: %s, code %d, a message of %d bytes (> %d): %.80s…", res.Status, r.Error.Code, len(r.Error.Message), mcpserver.MaxErrorMessage, r.Error.Message)
	}
}
