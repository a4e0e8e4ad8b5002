package mcpserver_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/errcode"
	"symbi/internal/mcpserver"
)

// rawScreen is the stdio transport with nothing behind it: the test writes client lines
// to its input, reads what screening passes on to the SDK, reads the lines answered on
// stdout, and writes lines as the SDK would (the transport's Writer).
type rawScreen struct {
	in  *io.PipeWriter
	sdk chan string // the lines the SDK reads
	out chan string // the lines written to stdout
	w   io.Writer   // the SDK's writer
}

// lines sends each line read from r to a new channel, closed at the end.
func lines(r io.Reader) chan string {
	ch := make(chan string, 16)
	go func() {
		br := bufio.NewReaderSize(r, 1<<20)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				close(ch)
				return
			}
			ch <- line
		}
	}()
	return ch
}

func newRawScreen(t *testing.T) *rawScreen {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	tr := mcpserver.NewStdioTransport(inR, outW).(*mcp.IOTransport)
	t.Cleanup(func() { inW.Close(); outR.Close(); tr.Reader.Close() })
	return &rawScreen{in: inW, sdk: lines(tr.Reader), out: lines(outR), w: tr.Writer}
}

func (s *rawScreen) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(s.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// passes sends line and requires the SDK to read it next, whole, and nothing on stdout.
func (s *rawScreen) passes(t *testing.T, line string) {
	t.Helper()
	s.send(t, line)
	select {
	case got := <-s.sdk:
		if got != line+"\n" {
			t.Fatalf("the SDK read %.200q, want %.200q", got, line)
		}
	case l := <-s.out:
		t.Fatalf("%.200s was answered %.300s, not passed on", line, l)
	case <-time.After(hangGuard):
		t.Fatalf("%.200s: neither passed on nor answered within %v", line, hangGuard)
	}
}

// answer returns the next line written to stdout.
func (s *rawScreen) answer(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-s.out:
		if !ok {
			t.Fatal("stdout closed")
		}
		return l
	case <-time.After(hangGuard):
		t.Fatalf("no line on stdout within %v", hangGuard)
	}
	return ""
}

// refused sends line and requires a -32600 answer with id and a message containing msg.
func (s *rawScreen) refused(t *testing.T, line, id, msg string) {
	t.Helper()
	s.send(t, line)
	var l string
	select {
	case l = <-s.out:
	case got := <-s.sdk:
		t.Fatalf("%.200s was passed on to the SDK (%.200q), not refused", line, got)
	case <-time.After(hangGuard):
		t.Fatalf("%.200s: neither refused nor passed on within %v", line, hangGuard)
	}
	var r response
	if err := json.Unmarshal([]byte(l), &r); err != nil {
		t.Fatalf("%q: %v", l, err)
	}
	if r.Error == nil || r.Error.Code != -32600 || string(r.ID) != id || !strings.Contains(r.Error.Message, msg) {
		t.Fatalf("%.200s: id %s error %+v; want id %s and -32600 containing %q", line, r.ID, r.Error, id, msg)
	}
}

// sdkWrites writes line as the SDK writes one, and returns what reached stdout.
func (s *rawScreen) sdkWrites(t *testing.T, line string) string {
	t.Helper()
	n, err := s.w.Write([]byte(line))
	if err != nil || n != len(line) {
		t.Fatalf("Write of a %d-byte line: %d, %v", len(line), n, err)
	}
	return s.answer(t)
}

// errorLine is the SDK's error response to id with a message of n bytes and data.
func errorLine(id string, n int, data string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"%s","data":%s}}`+"\n", id, strings.Repeat("m", n), data)
}

// TestTwoLinesAtLimitInARow: two lines of exactly MaxMessageBytes, one after the other,
// are both taken and answered: the SDK's frame limit leaves room for the newline that
// ends the first, which it reads as part of the second frame.
func TestTwoLinesAtLimitInARow(t *testing.T) {
	w := startWire(t, testProject(t, nil))
	w.initialize(t)
	const prefix = `{"jsonrpc":"2.0","id":"bigN","method":"tools/call","params":{"name":"parse_dsl","arguments":{"content":"`
	const suffix = `"}}}`
	for _, id := range []string{"big1", "big2"} {
		line := strings.Replace(prefix, "bigN", id, 1) + strings.Repeat("#", mcpserver.MaxMessageBytes-len(prefix)-len(suffix)) + suffix
		if len(line) != mcpserver.MaxMessageBytes {
			t.Fatalf("built a line of %d bytes", len(line))
		}
		w.send(t, line)
		r := w.next(t)
		if r.Error != nil || string(r.ID) != `"`+id+`"` || !strings.Contains(string(r.Result), "limit_exceeded: ") {
			t.Fatalf("a line of exactly %d bytes (%s): id %s error %+v result %.200s; want parse_dsl's limit_exceeded", mcpserver.MaxMessageBytes, id, r.ID, r.Error, r.Result)
		}
	}
	w.listAgents(t, 3)
}

// TestClippedErrorLineKeepsCodeIDAndData: an error line of the SDK's whose message is
// over MaxErrorMessage reaches stdout with its message cut to MaxErrorMessage bytes, its
// length said, and its id, code and data as they were; Write reports the SDK's whole line
// written.
func TestClippedErrorLineKeepsCodeIDAndData(t *testing.T) {
	s := newRawScreen(t)
	got := s.sdkWrites(t, errorLine(`"req-7"`, 5000, `{"k":"v"}`))
	var r struct {
		ID    json.RawMessage `json:"id"`
		Error struct {
			Code    int             `json:"code"`
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(got), &r); err != nil {
		t.Fatalf("%.200q: %v", got, err)
	}
	if len(r.Error.Message) > mcpserver.MaxErrorMessage || !strings.HasSuffix(r.Error.Message, "…(5000 bytes in all)") {
		t.Errorf("a 5000-byte message: %d bytes on stdout, ending %q", len(r.Error.Message), r.Error.Message[max(0, len(r.Error.Message)-30):])
	}
	if string(r.ID) != `"req-7"` || r.Error.Code != -32601 || string(r.Error.Data) != `{"k":"v"}` {
		t.Errorf("the clipped line: id %s code %d data %s; want id \"req-7\", code -32601, data {\"k\":\"v\"}", r.ID, r.Error.Code, r.Error.Data)
	}
}

// TestClippedErrorLineData: an error line of the SDK's with a short message and data over
// MaxErrorMessage reaches stdout with the data bounded: each string in it cut at
// errcode.MaxQuoted bytes, its length said; data still over the bound (10,000 numbers)
// is left out. The message is kept.
func TestClippedErrorLineData(t *testing.T) {
	s := newRawScreen(t)
	type line struct {
		Error struct {
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data"`
		} `json:"error"`
	}
	var r line
	long := strings.Repeat("u", 5000)
	got := s.sdkWrites(t, errorLine(`1`, 10, `{"uri":"`+long+`","n":[1,2]}`))
	if err := json.Unmarshal([]byte(got), &r); err != nil {
		t.Fatalf("%.200q: %v", got, err)
	}
	want := `{"n":[1,2],"uri":"` + long[:errcode.MaxQuoted] + `…(5000 bytes in all)"}`
	if string(r.Error.Data) != want || r.Error.Message != strings.Repeat("m", 10) {
		t.Errorf("data %.300s message %q; want data %.300s, the message whole", r.Error.Data, r.Error.Message, want)
	}
	numbers := "[" + strings.Repeat("1,", 9999) + "1]"
	got = s.sdkWrites(t, errorLine(`2`, 10, numbers))
	r = line{}
	if err := json.Unmarshal([]byte(got), &r); err != nil {
		t.Fatalf("%.200q: %v", got, err)
	}
	if r.Error.Data != nil || r.Error.Message != strings.Repeat("m", 10) {
		t.Errorf("data of 10,000 numbers: %.100s, message %q; want the data left out, the message whole", r.Error.Data, r.Error.Message)
	}
	// At the bound, data is passed as it is.
	exact := `"` + strings.Repeat("d", mcpserver.MaxErrorMessage-2) + `"`
	got = s.sdkWrites(t, errorLine(`3`, 10, exact))
	r = line{}
	if err := json.Unmarshal([]byte(got), &r); err != nil || string(r.Error.Data) != exact {
		t.Errorf("data of exactly %d bytes: %.100s (%v); want it whole", mcpserver.MaxErrorMessage, r.Error.Data, err)
	}
}

// TestErrorLineClippedJustOver: an SDK error line whose message is one byte over
// MaxErrorMessage is cut to at most MaxErrorMessage bytes; one whose message is exactly
// MaxErrorMessage bytes passes byte for byte.
func TestErrorLineClippedJustOver(t *testing.T) {
	s := newRawScreen(t)
	at := errorLine("1", mcpserver.MaxErrorMessage, "null")
	if got := s.sdkWrites(t, at); got != at {
		t.Errorf("an error line whose message is exactly %d bytes was changed:\n%.200q\nwant\n%.200q", mcpserver.MaxErrorMessage, got, at)
	}
	got := s.sdkWrites(t, errorLine("2", mcpserver.MaxErrorMessage+1, "null"))
	var r response
	if err := json.Unmarshal([]byte(got), &r); err != nil || r.Error == nil {
		t.Fatalf("%.200q: %v", got, err)
	}
	if len(r.Error.Message) > mcpserver.MaxErrorMessage || !strings.Contains(r.Error.Message, fmt.Sprintf("(%d bytes in all)", mcpserver.MaxErrorMessage+1)) {
		t.Errorf("a message of %d bytes reached stdout as %d bytes (%q…)", mcpserver.MaxErrorMessage+1, len(r.Error.Message), r.Error.Message[:40])
	}
}

// failingWriter fails every write.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errBroken }

// TestBrokenStdoutIsAnError: a write of the SDK's that stdout refuses is reported to the
// SDK as the error it is, also for an error line the transport cuts.
func TestBrokenStdoutIsAnError(t *testing.T) {
	tr := mcpserver.NewStdioTransport(strings.NewReader(""), failingWriter{}).(*mcp.IOTransport)
	for _, line := range []string{`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n", errorLine("2", 5000, "null")} {
		if n, err := tr.Writer.Write([]byte(line)); !errors.Is(err, errBroken) {
			t.Errorf("a write to a broken stdout: %d, %v; want %v", n, err, errBroken)
		}
	}
}

// TestErrorAnswerEndsFlight: an error response of the SDK's ends its request's flight as
// a result does: the id may be used again at once.
func TestErrorAnswerEndsFlight(t *testing.T) {
	s := newRawScreen(t)
	s.passes(t, `{"jsonrpc":"2.0","id":5,"method":"ping"}`)
	s.refused(t, `{"jsonrpc":"2.0","id":5,"method":"ping"}`, "null", "id 5 is already the id of a request in flight")
	if got := s.sdkWrites(t, errorLine("5", 10, "null")); !strings.Contains(got, `"id":5`) {
		t.Fatalf("the answer to 5: %q", got)
	}
	s.passes(t, `{"jsonrpc":"2.0","id":5,"method":"ping"}`)
}

// TestExactIDBounds: an integer id is taken when its magnitude is at most 2^53 − 1
// (0 included), and refused from 2^53 on, either sign.
func TestExactIDBounds(t *testing.T) {
	s := newRawScreen(t)
	for _, id := range []string{"0", "9007199254740991", "-9007199254740991", "9", "-1"} {
		s.passes(t, `{"jsonrpc":"2.0","id":`+id+`,"method":"ping"}`)
	}
	for _, id := range []string{"9007199254740992", "-9007199254740992"} {
		s.refused(t, `{"jsonrpc":"2.0","id":`+id+`,"method":"ping"}`, "null", "cannot be answered exactly")
	}
}

// nested is a ping whose message nests arrays and objects depth levels deep in all (the
// top-level object is the first).
func nested(depth int) string {
	// {…"params":{"_meta":{"x": opens three levels.
	return `{"jsonrpc":"2.0","id":23,"method":"ping","params":{"_meta":{"x":` + strings.Repeat("[", depth-3) + strings.Repeat("]", depth-3) + `}}}`
}

// TestDepthBound: a message nested exactly MaxMessageDepth levels deep is passed on;
// one level more is refused.
func TestDepthBound(t *testing.T) {
	s := newRawScreen(t)
	s.passes(t, nested(mcpserver.MaxMessageDepth))
	s.refused(t, nested(mcpserver.MaxMessageDepth+1), "null", "nested more than 1000 levels")
}

// TestNotificationsNotInFlight: notifications have no id and are never in flight: any
// number of them pass, one after another.
func TestNotificationsNotInFlight(t *testing.T) {
	s := newRawScreen(t)
	for range 3 {
		s.passes(t, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}`)
	}
}

// TestClientResponseNotInFlight: a client's response (to a request of the server's) is
// not a request: its id is not taken for one in flight, and a request with that id passes.
func TestClientResponseNotInFlight(t *testing.T) {
	s := newRawScreen(t)
	s.passes(t, `{"jsonrpc":"2.0","id":9,"result":{}}`)
	s.passes(t, `{"jsonrpc":"2.0","id":9,"method":"ping"}`)
}

// TestNullProgressToken: a null progress token is no token: the request passes.
func TestNullProgressToken(t *testing.T) {
	s := newRawScreen(t)
	s.passes(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_agents","arguments":{},"_meta":{"progressToken":null}}}`)
}

// TestRefusalMessageBound: a refusal's message of exactly MaxErrorMessage bytes is sent
// whole; one of a byte more is cut to at most MaxErrorMessage bytes, its length said. The
// SDK's refusal of a version tag quotes the tag: 63 bytes around it.
func TestRefusalMessageBound(t *testing.T) {
	s := newRawScreen(t)
	refusal := func(n int) string {
		t.Helper()
		tag := strings.Repeat("v", n)
		s.send(t, `{"jsonrpc":"`+tag+`","id":1,"method":"ping"}`)
		var r response
		if err := json.Unmarshal([]byte(s.answer(t)), &r); err != nil || r.Error == nil || r.Error.Code != -32600 || string(r.ID) != "1" {
			t.Fatalf("a version tag of %d bytes: %+v (%v); want -32600 for id 1", n, r, err)
		}
		return r.Error.Message
	}
	n := mcpserver.MaxErrorMessage - 63
	if msg := refusal(n); len(msg) != mcpserver.MaxErrorMessage || !strings.Contains(msg, strings.Repeat("v", n)+`"; expected "2.0"`) {
		t.Errorf("a refusal of exactly %d bytes: %d bytes, %q…%q; want it whole", mcpserver.MaxErrorMessage, len(msg), msg[:min(len(msg), 40)], msg[max(0, len(msg)-40):])
	}
	msg := refusal(n + 1)
	if len(msg) > mcpserver.MaxErrorMessage || !strings.HasSuffix(msg, fmt.Sprintf("…(%d bytes in all)", mcpserver.MaxErrorMessage+1)) {
		t.Errorf("a refusal of %d bytes: %d bytes, ending %q; want at most %d, its length said", mcpserver.MaxErrorMessage+1, len(msg), msg[max(0, len(msg)-40):], mcpserver.MaxErrorMessage)
	}
}

// TestHTTPBodyAtLimitScreened: a POST body of exactly MaxMessageBytes is screened as any
// other: a member name repeated in it is refused 400 with -32600, before the SDK reads it.
func TestHTTPBodyAtLimitScreened(t *testing.T) {
	url, cs := bareHTTPSession(t, mcpserver.HTTPOptions{})
	const prefix = `{"jsonrpc":"2.0","id":7,"method":"ping","params":{"_meta":{"a":1,"a":2,"pad":"`
	const suffix = `"}}}`
	body := prefix + strings.Repeat("x", mcpserver.MaxMessageBytes-len(prefix)-len(suffix)) + suffix
	if len(body) != mcpserver.MaxMessageBytes {
		t.Fatalf("built a body of %d bytes", len(body))
	}
	code, _, got := rawPost(t, url, cs.ID(), body)
	if code != http.StatusBadRequest || !strings.Contains(got, `"code":-32600`) || !strings.Contains(got, `member \"a\" appears twice`) {
		t.Fatalf("a %d-byte body with a repeated member: %d %.300s; want 400, -32600 naming the repeat", len(body), code, got)
	}
}
