package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxMessageBytes bounds one inbound JSON-RPC line. parse_dsl content (1 MiB) and
// verify_schema schemas (1 MiB) fit with room for JSON escaping.
const MaxMessageBytes = 16 << 20

// JSON-RPC error codes used for lines the server cannot take.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
)

// NewStdioTransport returns the transport symbi mcp serves on: newline-delimited JSON-RPC
// read from in and written to out. Unlike the SDK's stdio transport, a line that is not
// one well-formed JSON-RPC message — malformed JSON, a non-message, a batch, or more than
// MaxMessageBytes — is answered with a JSON-RPC error (id null when it cannot be read) and
// skipped; the session goes on.
func NewStdioTransport(in io.Reader, out io.Writer) mcp.Transport {
	pr, pw := io.Pipe()
	w := &lockedWriter{w: out}
	go screen(in, pw, w)
	return &mcp.IOTransport{Reader: pr, Writer: w, MaxLineLength: MaxMessageBytes + 1}
}

// lockedWriter serializes whole-line writes of the SDK and of screen.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil }

// screen copies acceptable lines from in to pw and answers the others on out.
func screen(in io.Reader, pw *io.PipeWriter, out io.Writer) {
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		line, tooLong, err := readLine(r, MaxMessageBytes)
		if tooLong {
			reject(out, nil, codeInvalidRequest, fmt.Sprintf("message exceeds %d bytes (16 MiB); skipped", MaxMessageBytes))
		} else if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			if id, code, msg := check(trimmed); code != 0 {
				reject(out, id, code, msg)
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

// readLine reads one line without its newline. A line longer than limit is consumed and
// reported as tooLong. err is io.EOF (or a read error) after the last line.
func readLine(r *bufio.Reader, limit int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > limit+1 {
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

// check reports why a line is not one JSON-RPC message: a code and message, with the
// line's id when it has a usable one.
func check(line []byte) (id any, code int, msg string) {
	if !json.Valid(line) {
		return nil, codeParseError, "parse error: the line is not valid JSON"
	}
	if line[0] == '[' {
		return nil, codeInvalidRequest, "JSON-RPC batches are not supported"
	}
	var probe struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(line, &probe) == nil && len(probe.ID) > 0 {
		var v any
		if json.Unmarshal(probe.ID, &v) == nil {
			switch v.(type) {
			case string, float64:
				id = v
			}
		}
	}
	// Go's decoder lets the last of two equal member names win, while another reader (a
	// proxy in front, an auditor) may take the first: a message with a repeated name
	// would mean different calls to each. Refuse it, wherever the repeat stands.
	if name, path, dup := duplicateMember(line); dup {
		if name == "id" && path == "$" {
			id = nil // which id would be a guess
		}
		return id, codeInvalidRequest, fmt.Sprintf("invalid request: member %q appears twice in the object at %s", name, path)
	}
	decoded, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		return id, codeInvalidRequest, "invalid request: " + err.Error()
	}
	if _, ok := decoded.(*jsonrpc.Response); ok {
		var members map[string]json.RawMessage
		json.Unmarshal(line, &members)
		_, hasResult := members["result"]
		_, hasError := members["error"]
		if hasResult == hasError {
			return id, codeInvalidRequest, "invalid request: a response needs exactly one of result and error"
		}
	}
	return nil, 0, ""
}

// duplicateMember reports the first member name that appears twice in one object of
// the JSON text data (which must be valid), with the path of that object: "$", then a
// ".name" or "[index]" step per level.
func duplicateMember(data []byte) (name, path string, dup bool) {
	type frame struct {
		members map[string]bool // nil for an array
		wantKey bool            // in an object: the next token is a member name
		key     string          // in an object: the member whose value is being read
		index   int             // in an array: the index of the next element
		step    string          // how the enclosing value reaches this one
	}
	var stack []*frame
	pathOf := func() string {
		var b strings.Builder
		b.WriteString("$")
		for _, f := range stack {
			b.WriteString(f.step)
		}
		return b.String()
	}
	// closed marks the value just read as complete in its enclosing object.
	closed := func() {
		if n := len(stack); n > 0 && stack[n-1].members != nil {
			stack[n-1].wantKey = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", "", false // io.EOF after the value; data was checked valid
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if tok == json.Delim('}') || tok == json.Delim(']') {
			stack = stack[:len(stack)-1]
			closed()
			continue
		}
		if top != nil && top.wantKey {
			k := tok.(string)
			if top.members[k] {
				return k, pathOf(), true
			}
			top.members[k], top.wantKey, top.key = true, false, k
			continue
		}
		step := ""
		switch {
		case top != nil && top.members != nil:
			step = "." + top.key
		case top != nil:
			step = fmt.Sprintf("[%d]", top.index)
			top.index++
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{members: map[string]bool{}, wantKey: true, step: step})
		case json.Delim('['):
			stack = append(stack, &frame{step: step})
		default:
			closed()
		}
	}
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
