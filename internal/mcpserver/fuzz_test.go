package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"symbi/internal/mcpserver"
	"symbi/internal/strictjson"
	"symbi/internal/syncbuf"
)

// FuzzStdioTransport feeds arbitrary input to the transport and requires that every
// non-blank line is either passed on as exactly one JSON-RPC message or answered with
// exactly one JSON-RPC error, and that the output holds nothing but those errors.
func FuzzStdioTransport(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`{"jsonrpc":"2.0","id":"x","error":{"code":-1,"message":"m"}}`,
		`{"jsonrpc":"2.0","id":1,"method":`,
		`{}`,
		`[{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`,
		`42`,
		`"str"`,
		`null`,
		`{"jsonrpc":"2.0","id":"abc","method":5}`,
		`{"id":3,"method":"tools/list"}`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}\r\n\n  \n{}",
		"\xff\xfe",
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"} {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"b\"}",
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"list_agents","name":"invoke_agent"}}`,
		`{"jsonrpc":"2.0","id":8,"id":9,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"a":[{"k":1,"k":2}]}}}`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"b\"}",
		`{"jsonrpc":"2.0","ID":1,"method":"a"}`,
		`{"jsonrpc":"2.0","id":1.5,"method":"a"}`,
		`{"jsonrpc":"2.0","id":-0,"method":"a"}`,
		`{"jsonrpc":"2.0","id":null,"method":"a"}`,
		`{"jsonrpc":"2.0","id":"\ud800","method":"a"}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":[[[[[[[[[[]]]]]]]]]]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		// A line is blank when it holds JSON white space alone (RFC 8259: space, tab, CR,
		// LF): any other character, a vertical tab or a no-break space, makes it a line to
		// pass on or answer.
		var want int
		for _, line := range strings.Split(data, "\n") {
			if len(bytes.Trim([]byte(line), " \t\r\n")) > 0 {
				want++
			}
		}
		out := &syncbuf.Buffer{}
		conn, err := mcpserver.NewStdioTransport(strings.NewReader(data+"\n"), out).Connect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		var passed int
		for {
			_, err := conn.Read(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("a line passed the screen but the connection failed on it: %v\ninput %q", err, data)
			}
			passed++
		}
		var rejected int
		for _, line := range strings.SplitAfter(out.String(), "\n") {
			if line == "" {
				continue
			}
			var r response
			dec := json.NewDecoder(strings.NewReader(line))
			if err := dec.Decode(&r); err != nil || dec.More() || r.JSONRPC != "2.0" || r.Error == nil || !strings.HasSuffix(line, "\n") {
				t.Fatalf("output line %q is not one JSON-RPC error (%v)", line, err)
			}
			rejected++
		}
		// No line with a repeated member name gets past the screen.
		var repeats int
		for _, line := range strings.Split(data, "\n") {
			var dup *strictjson.DuplicateError
			if b := bytes.Trim([]byte(line), " \t\r\n"); json.Valid(b) && errors.As(strictjson.Check(b, strictjson.Options{}), &dup) {
				repeats++
			}
		}
		if passed > want-repeats {
			t.Fatalf("%d lines passed, but %d of the %d lines repeat a member name\ninput %q", passed, repeats, want, data)
		}
		if passed+rejected != want {
			t.Fatalf("%d non-blank lines, %d passed and %d rejected\ninput %q\noutput %q", want, passed, rejected, data, out.String())
		}
	})
}
