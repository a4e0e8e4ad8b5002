package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/errcode"
	"symbi/internal/strictjson"
)

// MaxMessageBytes bounds one inbound JSON-RPC line. parse_dsl content (1 MiB) and
// verify_schema schemas (1 MiB) fit with room for JSON escaping.
const MaxMessageBytes = 16 << 20

// JSON-RPC error codes used for lines the server cannot take.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601 // over HTTP (methodNotFound); stdio's comes from the SDK
)

// NewStdioTransport returns the transport symbi mcp serves on: newline-delimited JSON-RPC
// read from in and written to out. Unlike the SDK's stdio transport, a line that is not
// one well-formed JSON-RPC message — malformed JSON, a non-message, a batch, or more than
// MaxMessageBytes — is answered with a JSON-RPC error (id null when it cannot be read) and
// skipped; the session goes on.
func NewStdioTransport(in io.Reader, out io.Writer) mcp.Transport {
	pr, pw := io.Pipe()
	w := &lockedWriter{w: out, inflight: map[string]bool{}}
	go screen(in, pw, w)
	return &mcp.IOTransport{Reader: pr, Writer: w, MaxLineLength: MaxMessageBytes + 1}
}

// WatchWrites returns a writer that passes every write to w and calls broken once, with
// the error, when a write first fails — the client stopped reading (EPIPE) or the stream
// is otherwise gone. The server cannot answer anyone any more, so its runs in flight are
// to be cancelled (their journals still end) rather than held for no one.
func WatchWrites(w io.Writer, broken func(error)) io.Writer {
	return &watchedWriter{w: w, broken: broken}
}

// WatchReads returns a reader that passes every read to r and calls ended once, with the
// error, when a read first fails: io.EOF when the client closed its end. The session is
// over then (the SDK cancels the calls in flight), and the server need not wait for them
// to return before it begins its shutdown.
func WatchReads(r io.Reader, ended func(error)) io.Reader {
	return &watchedReader{r: r, ended: ended}
}

type watchedReader struct {
	r     io.Reader
	once  sync.Once
	ended func(error)
}

func (w *watchedReader) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if err != nil {
		w.once.Do(func() { w.ended(err) })
	}
	return n, err
}

type watchedWriter struct {
	w      io.Writer
	once   sync.Once
	broken func(error)
}

func (w *watchedWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if err != nil {
		w.once.Do(func() { w.broken(err) })
	}
	return n, err
}

// lockedWriter serializes whole-line writes of the SDK and of screen, and keeps the ids of
// the requests passed on to the SDK and not yet answered: the SDK answers nothing to a
// request whose id is in flight (it takes it for a notification), so screen refuses it.
type lockedWriter struct {
	mu       sync.Mutex
	w        io.Writer
	inflight map[string]bool // idKey of each request passed on and not answered
}

// clipErrorLine is the SDK's error response line with its message cut as clipMessage
// cuts it and its data as clipData does (the SDK refuses an unknown method before any
// middleware, quoting its name whole); line itself when it is no error response or both
// fit.
func clipErrorLine(line []byte) []byte {
	msg, err := jsonrpc.DecodeMessage(bytes.TrimSuffix(line, []byte("\n")))
	res, ok := msg.(*jsonrpc.Response)
	if err != nil || !ok || res.Error == nil {
		return line
	}
	var we *jsonrpc.Error
	if !errors.As(res.Error, &we) || len(we.Message) <= MaxErrorMessage && len(we.Data) <= MaxErrorMessage {
		return line
	}
	res.Error = &jsonrpc.Error{Code: we.Code, Message: clipMessage(we.Message), Data: clipData(we.Data)}
	out, err := jsonrpc.EncodeMessage(res)
	if err != nil {
		return line
	}
	return append(out, '\n')
}

// Write writes one line of the SDK's; a response ends its request's flight, before the
// client can read it (and reuse its id).
func (l *lockedWriter) Write(p []byte) (int, error) {
	key, response, isError := responseKey(p)
	line := p
	// Only an error response is decoded whole (a long result never is), whatever the
	// length of the id before its "error" member.
	if isError && len(p) > MaxErrorMessage {
		line = clipErrorLine(p)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if response {
		delete(l.inflight, key)
	}
	if _, err := l.w.Write(line); err != nil {
		return 0, err
	}
	return len(p), nil // the SDK's line, written (cut or whole)
}

func (l *lockedWriter) Close() error { return nil }

// begin records the request id key as in flight, or reports that it already is.
func (l *lockedWriter) begin(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inflight[key] {
		return false
	}
	l.inflight[key] = true
	return true
}

// flying reports whether a request with the id key is in flight.
func (l *lockedWriter) flying(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inflight[key]
}

// reject answers a line screen refused.
func (l *lockedWriter) reject(id any, code int, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	reject(l.w, id, code, msg)
}

// idKey names a JSON-RPC id (as json.Unmarshal into any gives it: a string, or a float64
// holding an integer check accepted) so that equal ids have equal keys: "s" + the string,
// or "n" + the integer.
func idKey(id any) string {
	switch v := id.(type) {
	case string:
		return "s" + v
	case float64:
		return "n" + strconv.FormatInt(int64(v), 10)
	}
	return ""
}

// responseKey returns the idKey of the id of a line the SDK writes when it is a response
// (an id, and a result or an error, not a method), and whether it is an error response.
// It reads the top-level members in order and stops as soon as it knows: the SDK writes
// "jsonrpc", "id", then "method" or "result"/"error", so a large result or params is
// never read.
func responseKey(line []byte) (key string, response, isError bool) {
	dec := json.NewDecoder(bytes.NewReader(line))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", false, false
	}
	var id any
	seen := false
	for dec.More() {
		name, err := dec.Token()
		if err != nil {
			return "", false, false
		}
		switch name {
		case "method":
			return "", false, false
		case "id":
			if dec.Decode(&id) != nil {
				return "", false, false
			}
			seen = true
		case "result":
			response = true
		case "error":
			response, isError = true, true
		}
		if seen && response {
			break
		}
		if name != "id" {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return "", false, false
			}
		}
	}
	if !seen || !response || id == nil {
		return "", false, false
	}
	return idKey(id), true, isError
}

// jsonSpace is JSON's white space (RFC 8259): a line is trimmed of it alone — not of
// Unicode spaces or a vertical tab, which make the line no JSON text.
const jsonSpace = " \t\r\n"

// screen copies acceptable lines from in to pw and answers the others on out.
func screen(in io.Reader, pw *io.PipeWriter, out *lockedWriter) {
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		line, tooLong, err := readLine(r, MaxMessageBytes)
		if tooLong {
			out.reject(nil, codeInvalidRequest, fmt.Sprintf("message exceeds %d bytes (16 MiB); skipped", MaxMessageBytes))
		} else if trimmed := bytes.Trim(line, jsonSpace); len(trimmed) > 0 {
			v := check(trimmed)
			if v.code == 0 {
				if v.key != "" && !out.begin(v.key) {
					v = refused(nil, codeInvalidRequest, fmt.Sprintf("invalid request: id %.40s is already the id of a request in flight; an id is not reused before its answer", idText(v.key)))
				}
			} else if v.id != nil && out.flying(idKey(v.id)) {
				v.id = nil // an answer with that id would seem to answer the request in flight
			}
			if v.code != 0 {
				out.reject(v.id, v.code, v.msg)
			} else if _, werr := pw.Write(append(trimmed, '\n')); werr != nil {
				return
			}
		}
		if err != nil {
			pw.CloseWithError(err)
			return
		}
	}
}

// idText shows the id of an idKey as JSON would.
func idText(key string) string {
	if strings.HasPrefix(key, "s") {
		return strconv.Quote(key[1:])
	}
	return key[1:]
}

// readLine reads one line without its newline. A line longer than limit is consumed and
// reported as tooLong. err is io.EOF (or a read error) after the last line.
func readLine(r *bufio.Reader, limit int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			// The line's length without its newline: the last line of the input may
			// have none, and is held to the same limit.
			n := len(line) + len(chunk)
			if bytes.HasSuffix(chunk, []byte("\n")) {
				n--
			}
			if n > limit {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), tooLong, err
	}
}

// MaxMessageDepth is the deepest nesting of arrays and objects in one message: the go-sdk
// decodes no deeper.
const MaxMessageDepth = 1000

// maxExactID is the largest integer id the server echoes exactly: the go-sdk reads a
// numeric id through a float64, which holds every integer up to 2^53 − 1 and no more.
const maxExactID = 1<<53 - 1

// rpcNames are the member names of a JSON-RPC message. The go-sdk reads them by their
// exact names; encoding/json, and so perhaps a proxy in front or an auditor, would also
// take "ID" for "id".
var rpcNames = []string{"jsonrpc", "id", "method", "params", "result", "error"}

// screened is check's verdict on a line: code 0 for a message to pass on.
type screened struct {
	id   any    // the id a refusal answers with (nil: null)
	code int    // the JSON-RPC error code of a refusal
	msg  string // its message
	key  string // for a request passed on, the idKey of its id; "" otherwise
}

func refused(id any, code int, msg string) screened {
	return screened{id: id, code: code, msg: clipMessage(msg)} // a decoder's message may quote the line
}

// check says whether a line is one JSON-RPC message the server can take. The rules, in
// order: UTF-8 (RFC 8259 §8.1), JSON, nesting at most MaxMessageDepth, no batch, an id
// the server can echo exactly (a string, or an integer of magnitude at most 2^53 − 1; a
// request's never null), no member name twice, no top-level member named like a JSON-RPC
// member but for case, no \u escape of a lone surrogate, and the SDK's own reading.
func check(line []byte) screened {
	if !utf8.Valid(line) {
		return refused(nil, codeParseError, "parse error: the line is not valid UTF-8 (JSON text between systems is UTF-8, RFC 8259 §8.1)")
	}
	strict := strictjson.Check(line, strictjson.Options{Single: true, NoLoneSurrogates: true, MaxDepth: MaxMessageDepth})
	switch {
	case strict == nil: // valid JSON: Check refuses whatever json.Valid refuses
	case errors.Is(strict, strictjson.ErrDepth):
		return refused(nil, codeInvalidRequest, fmt.Sprintf("invalid request: arrays and objects nested more than %d levels deep", MaxMessageDepth))
	case !json.Valid(line):
		return refused(nil, codeParseError, "parse error: the line is not valid JSON")
	}
	if line[0] == '[' {
		return refused(nil, codeInvalidRequest, "JSON-RPC batches are not supported")
	}
	var members map[string]json.RawMessage // by their exact names, as the SDK reads them
	json.Unmarshal(line, &members)
	rawID, request := members["id"], members["method"] != nil
	if why := badID(rawID, request); why != "" {
		return refused(nil, codeInvalidRequest, "invalid request: "+why)
	}
	var id any
	if len(rawID) > 0 && rawID[0] != 'n' {
		json.Unmarshal(rawID, &id)
	}
	// Go's decoder lets the last of two equal member names win, while another reader (a
	// proxy in front, an auditor) may take the first: a message with a repeated name
	// would mean different calls to each. Refuse it, wherever the repeat stands.
	var dup *strictjson.DuplicateError
	if errors.As(strict, &dup) {
		if topLevelCount(line, "id") != 1 {
			id = nil // which id would be a guess
		}
		return refused(id, codeInvalidRequest, fmt.Sprintf("invalid request: member %s appears twice in the object at %s", errcode.Quote(dup.Name), errcode.Clip(dup.Path)))
	}
	names := slices.Sorted(maps.Keys(members))
	for _, k := range names {
		for _, n := range rpcNames {
			if k != n && strings.EqualFold(k, n) {
				return refused(id, codeInvalidRequest, fmt.Sprintf("invalid request: member %s is %q spelled otherwise (JSON-RPC names are exact; another reader might take one for the other)", errcode.Quote(k), n))
			}
		}
	}
	// Go's decoder reads a lone surrogate's escape as U+FFFD: the text used would not be
	// the text sent.
	if errors.Is(strict, strictjson.ErrSurrogate) {
		return refused(id, codeInvalidRequest, fmt.Sprintf("invalid request: %v (a string must be Unicode text)", strict))
	}
	decoded, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		return refused(id, codeInvalidRequest, "invalid request: "+err.Error())
	}
	if _, ok := decoded.(*jsonrpc.Response); ok {
		_, hasResult := members["result"]
		_, hasError := members["error"]
		if hasResult == hasError {
			return refused(id, codeInvalidRequest, "invalid request: a response needs exactly one of result and error")
		}
	}
	if request && members["params"] != nil {
		// The SDK reads a progress token as it reads an id, a number through a float64:
		// notifications/progress would carry another token than the one the client sent.
		// The token is found as the SDK finds it — _meta a member of params as a struct
		// field is, its key "progressToken" exact once the JSON escapes are read
		// ("progress\u0054oken" is that key) — whatever the line's spelling.
		var p struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		}
		if json.Unmarshal(members["params"], &p) == nil {
			if token := p.Meta["progressToken"]; token != nil && string(token) != "null" {
				if why := badID(token, true); why != "" {
					return refused(id, codeInvalidRequest, "invalid request: the progress token: "+strings.ReplaceAll(why, "an id", "a progress token"))
				}
			}
		}
	}
	if request && id != nil {
		return screened{key: idKey(id)}
	}
	return screened{}
}

// badID says why a message's id (raw; nil when absent) cannot be taken, or "".
func badID(raw json.RawMessage, request bool) string {
	switch {
	case raw == nil:
		return ""
	case string(raw) == "null":
		if request {
			return "a request's id is a string or an integer, never null (a notification has no id)"
		}
		return ""
	case raw[0] == '"':
		return ""
	case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
		// -0 is read as 0 and answered so: not exact.
		if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil && n >= -maxExactID && n <= maxExactID && string(raw) != "-0" {
			return ""
		}
		return fmt.Sprintf("id %.40s cannot be answered exactly: an id is a string or an integer of magnitude at most 2^53 − 1", raw)
	}
	return "an id is a string or an integer"
}

// topLevelCount counts the members named name in the top-level object of the JSON text
// line (already valid).
func topLevelCount(line []byte, name string) int {
	dec := json.NewDecoder(bytes.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0
	}
	n := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return n
		}
		if tok == name {
			n++
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return n
		}
	}
	return n
}

// reject writes a JSON-RPC error response.
func reject(out io.Writer, id any, code int, msg string) {
	resp := struct {
		JSONRPC string `json:"jsonrpc"`
		ID      any    `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id}
	resp.Error.Code, resp.Error.Message = code, msg
	b, _ := json.Marshal(resp)
	out.Write(append(b, '\n'))
}
