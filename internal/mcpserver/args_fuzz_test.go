package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"symbi/internal/strictjson"
	"symbi/internal/syncbuf"
)

// argTypes are the tools' argument structs decodeArgs reads, each with a fresh value.
var argTypes = []func() any{
	func() any { return new(invokeInput) },
	func() any { return new(listInput) },
	func() any { return new(parseInput) },
	func() any { return new(agentInput) },
	func() any { return new(noInput) },
	func() any { return new(startInput) },
	func() any { return new(runInput) },
	func() any { return new(eventsInput) },
	func() any { return new(listRunsInput) },
	func() any { return new(resolveInput) },
	func() any { return new(approveInput) },
}

// FuzzDecodeArgs: tool arguments come from any MCP client. decodeArgs never panics on
// them, and on the JSON the transport lets through it accepts exactly what its contract
// says (server.go): one JSON object whose member names each match a json tag of the
// struct exactly and appear at most once, values of the declared types, no null, no ""
// for an args:"nonempty" field — and then decodes what encoding/json decodes. Its
// refusals are one line.
func FuzzDecodeArgs(f *testing.F) {
	for i, s := range []string{
		`{"agent":"a","prompt":"p"}`,
		`{}`,
		`{"file":"agents/a.symbi"}`,
		`{"agent":"a"}`,
		`{}`,
		`{"agent":"a","prompt":"p","system_prompt":"s","workspace":"/w"}`,
		`{"run_id":"r"}`,
		`{"run_id":"r","after":3,"limit":5,"wait_ms":100}`,
		`{"status":"completed","after":"x","limit":1}`,
		`{"run_id":"r","resolution":"accepted","note":"n"}`,
		`{"run_id":"r","request_id":"answer","decision":"approve"}`,
	} {
		f.Add([]byte(s), uint8(i))
	}
	for _, s := range []string{
		`{"agent":"a","agent":"b"}`, `{"agent":"a","\u0061gent":"b"}`, `{"Agent":"a"}`, `{"AGENT":"a"}`,
		`{"agent":null}`, `{"system_prompt":null}`, `{"agent":1}`, `{"agent":["a"]}`, `{"agent":{"x":1}}`,
		`null`, ``, `[]`, `"x"`, `1`, `{"x":1}`,
	} {
		f.Add([]byte(s), uint8(0))
	}
	for _, s := range []string{
		`{"run_id":"r","after":1.0}`, `{"run_id":"r","after":1e2}`, `{"run_id":"r","after":-0}`, `{"run_id":"r","limit":null}`,
		`{"run_id":"r","limit":9223372036854775808}`, `{"run_id":"r","wait_ms":"1"}`, `{"run_id":"r","after":-1}`,
	} {
		f.Add([]byte(s), uint8(7))
	}
	for _, s := range []string{`{"agent":""}`, `{"after":""}`, `{"status":"","status":"x"}`, `{"limit":0}`} {
		f.Add([]byte(s), uint8(8))
	}
	f.Fuzz(func(t *testing.T, raw []byte, which uint8) {
		mk := argTypes[int(which)%len(argTypes)]
		v := mk()
		err := decodeArgs(json.RawMessage(raw), v)
		if err != nil && strings.ContainsAny(err.Error(), "\r\n") {
			t.Fatalf("%q: a refusal of more than one line: %q", raw, err)
		}
		text := raw
		if len(text) == 0 || string(text) == "null" {
			text = []byte("{}")
		}
		if !json.Valid(text) {
			return // the transport refuses it before a tool sees it
		}
		want := mk()
		why := refArgs(text, reflect.TypeOf(want).Elem())
		if why == "" && json.Unmarshal(text, want) != nil {
			why = "encoding/json refuses it"
		}
		switch {
		case err != nil && why == "":
			t.Fatalf("%T %q: refused (%v), but it is within the contract", v, raw, err)
		case err == nil && why != "":
			t.Fatalf("%T %q: accepted as %+v, but %s", v, raw, v, why)
		case err == nil && !reflect.DeepEqual(v, want):
			t.Fatalf("%T %q: decoded %+v, encoding/json %+v", v, raw, v, want)
		}
	})
}

// refArgs says why the valid JSON text is not arguments of the struct type t, or "".
func refArgs(text []byte, t reflect.Type) string {
	var members map[string]json.RawMessage
	if text[0] != '{' || json.Unmarshal(text, &members) != nil {
		return "not an object"
	}
	if err := strictjson.Check(text, strictjson.Options{Single: true}); err != nil {
		return err.Error()
	}
	fields := map[string]reflect.StructField{}
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			fields[name] = t.Field(i)
		}
	}
	for name, raw := range members {
		f, ok := fields[name]
		if !ok {
			return "unknown member " + strconv.Quote(name)
		}
		if string(raw) == "null" {
			return name + " is null"
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch ft.Kind() {
		case reflect.String:
			if raw[0] != '"' {
				return name + " is not a string"
			}
			if string(raw) == `""` && f.Tag.Get("args") == "nonempty" {
				return name + " is empty"
			}
		case reflect.Int, reflect.Int64:
			if _, err := strconv.ParseInt(string(raw), 10, 64); err != nil {
				return name + " is not an integer"
			}
		default:
			return "a field of kind " + ft.Kind().String()
		}
	}
	return ""
}

// TestDecodeArgsNullLimitNamesItsType: a null limit is refused with a message naming what
// limit is — an integer — as the other members' refusals do ("wait_ms must be an integer
// …"), not "an object": the field's type is a pointer, *int, and its element type is what
// the message names.
func TestDecodeArgsNullLimitNamesItsType(t *testing.T) {
	for _, tc := range []struct {
		v   any
		arg string
	}{{new(eventsInput), `{"run_id":"r","limit":null}`}, {new(listRunsInput), `{"limit":null}`}} {
		err := decodeArgs(json.RawMessage(tc.arg), tc.v)
		if err == nil {
			t.Fatalf("%s: accepted", tc.arg)
		}
		if strings.Contains(err.Error(), "object") || !strings.Contains(err.Error(), "integer") {
			t.Errorf("%s: %q; want it to say limit is an integer", tc.arg, err)
		}
	}
}

// rpcError is one JSON-RPC error answer.
type rpcError struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   *struct {
		Code int `json:"code"`
	} `json:"error"`
}

// stdioVerdict runs msg, one line, through the stdio transport: whether it was passed on,
// else the error answered.
func stdioVerdict(t *testing.T, msg []byte) (passed bool, answer *rpcError) {
	out := &syncbuf.Buffer{}
	conn, err := NewStdioTransport(bytes.NewReader(append(bytes.Clone(msg), '\n')), out).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		if _, err := conn.Read(ctx); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("stdio: %v", err)
			}
			break
		}
		passed = true
	}
	if out.String() != "" {
		answer = &rpcError{}
		if err := json.Unmarshal([]byte(out.String()), answer); err != nil || answer.Error == nil {
			t.Fatalf("stdio answered %q", out.String())
		}
	}
	return passed, answer
}

// FuzzScreenHTTP: docs/security-model.md, "The same holds over HTTP, where a proxy in
// front is the usual set-up: a POST body is screened by the stdio transport's rules — one
// message, no batch, no repeated name — and refused with HTTP 400 and the same JSON-RPC
// error otherwise." Whatever the body, screenHTTP passes it on unchanged exactly when the
// stdio transport passes the same message as a line, and otherwise answers 400 with one
// JSON-RPC error of the code stdio gives. (A body holding a line break is a message stdio
// would read as several lines; it is checked only to pass strict, single JSON.)
func FuzzScreenHTTP(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]`,
		`{"jsonrpc":"2.0","id":1,"id":2,"method":"a"}`,
		`{"jsonrpc":"2.0","ID":1,"method":"a"}`,
		`{"jsonrpc":"2.0","id":1.5,"method":"a"}`,
		`{"jsonrpc":"2.0","id":"\ud800","method":"a"}`,
		`{"jsonrpc":"2.0","id":1,"method":"a"} {"jsonrpc":"2.0","id":2,"method":"b"}`,
		"{\"jsonrpc\":\"2.0\",\r\n\"id\":1,\"method\":\"a\"}",
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"b\"}",
		"  \t", "", "\xff", `{`, `null`, `{}`, "\v{}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var got []byte
		called := false
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			called = true
			got, _ = io.ReadAll(r.Body)
		})
		h := screenHTTP(next, newBodyBudget(0, 0), time.Minute)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mcp", bytes.NewReader(body)))
		if called && !bytes.Equal(got, body) {
			t.Fatalf("%q passed on as %q", body, got)
		}
		if !called && rec.Code != http.StatusBadRequest {
			t.Fatalf("%q: answered %d, want 400", body, rec.Code)
		}
		msg := bytes.Trim(body, jsonSpace)
		if called && len(msg) > 0 && (!json.Valid(msg) || strictjson.Check(msg, strictjson.Options{Single: true, NoLoneSurrogates: true}) != nil) {
			t.Fatalf("%q passed on: not one strict JSON message", body)
		}
		if bytes.ContainsAny(msg, "\n") {
			return
		}
		passed, answer := stdioVerdict(t, msg)
		if len(msg) == 0 {
			passed = true // stdio skips a blank line; HTTP leaves an empty body to the SDK
		}
		if called != passed {
			t.Fatalf("%q: HTTP passes it on: %v, stdio: %v", body, called, passed)
		}
		if called {
			return
		}
		var e rpcError
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == nil || e.JSONRPC != "2.0" {
			t.Fatalf("%q: HTTP 400 body %q is not one JSON-RPC error", body, rec.Body.String())
		}
		if answer == nil || e.Error.Code != answer.Error.Code || string(e.ID) != string(answer.ID) {
			t.Fatalf("%q: HTTP answers %s, stdio %+v", body, rec.Body.String(), answer)
		}
	})
}
