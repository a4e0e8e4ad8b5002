package acp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"

	sdk "github.com/coder/acp-go-sdk"
)

// sdkMessage is the ACP SDK's own reading of a line (its unexported anyMessage, v0.13.0,
// connection.go): the line check must take exactly the lines the SDK reads as a message.
type sdkMessage struct {
	JSONRPC string            `json:"jsonrpc"`
	ID      *json.RawMessage  `json:"id,omitempty"`
	Method  string            `json:"method,omitempty"`
	Params  json.RawMessage   `json:"params,omitempty"`
	Result  json.RawMessage   `json:"result,omitempty"`
	Error   *sdk.RequestError `json:"error,omitempty"`
}

// FuzzLines runs the agent's stdout, any bytes, through the line check that stands
// before the SDK's reader. Either every byte reaches the SDK unchanged, or the run is
// aborted as malformed ACP and what reached the SDK is the whole lines before the one
// refused. Every non-blank line passed is one the SDK reads as a message — a request, a
// notification or a response, no log line and no skipped line — and the check counts as
// a request exactly what the SDK answers as one; a refused line is one the SDK would not
// read as a message, or a request past the bound of unanswered ones.
func FuzzLines(f *testing.F) {
	for _, s := range []string{
		"",
		"\n\n  \r\n",
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{}}}` + "\n",
		`{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file","params":{}}` + "\n",
		`{"jsonrpc":"2.0","id":"a","result":{}}` + "\r\n" + `{"jsonrpc":"2.0","id":null,"method":"x"}`,
		`{"jsonrpc":"2.0","id":2,"error":{"code":-32600,"message":"no"}}` + "\n",
		`{"jsonrpc":2,"id":1,"result":{}}` + "\n",
		`{"jsonrpc":"2.0","id":1,"error":"no"}` + "\n",
		`{"jsonrpc":"2.0","id":null}` + "\n",
		`{"jsonrpc":"2.0"}` + "\n",
		"[1]\n",
		"not json\n",
		`{"jsonrpc":"2.0","ID":3,"METHOD":"m"}` + "\n",
		`{"jsonrpc":"2.0","method":"m","method":""}` + "\n",
		`{"id":1,"method":"m"}` + "\n" + `{"id":1,"method":"m"}`,
		"\"{}\"\n",
		`{"jsonrpc":"2.0","id":1,"method":"m","params":1e999}` + "\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &runner{aborted: make(chan struct{})}
		pr, pw := io.Pipe()
		go r.checkLines(bytes.NewReader(data), pw)
		passed, _ := io.ReadAll(pr)

		if !bytes.HasPrefix(data, passed) {
			t.Fatalf("passed %q, not a prefix of the input %q", passed, data)
		}
		err := r.abortedErr()
		switch {
		case err == nil && len(passed) != len(data):
			t.Fatalf("no abort, but %d of %d bytes passed", len(passed), len(data))
		case err == nil && !r.eof.Load():
			t.Fatal("the input ended, and the end was not noted")
		case err != nil && !errors.Is(err, ErrMalformed):
			t.Fatalf("aborted with %v, want malformed ACP", err)
		case err != nil && len(passed) > 0 && passed[len(passed)-1] != '\n':
			t.Fatalf("aborted, and the bytes passed end in the middle of a line: %q", passed)
		}

		requests := int64(0)
		for line := range bytes.Lines(passed) {
			msg := bytes.TrimSpace(line)
			if len(msg) == 0 {
				continue
			}
			var m sdkMessage
			if err := json.Unmarshal(msg, &m); err != nil {
				t.Fatalf("the SDK cannot read a line passed (it logs and skips it): %q: %v", msg, err)
			}
			if m.ID == nil && m.Method == "" {
				t.Fatalf("the SDK skips a line passed, a message with neither id nor method: %q", msg)
			}
			if m.ID != nil && m.Method != "" {
				requests++
			}
		}
		if got := r.unanswered.Load(); got != requests {
			t.Fatalf("%d requests counted, the SDK reads %d", got, requests)
		}

		if err == nil {
			return
		}
		rest := data[len(passed):]
		refused, _, _ := bytes.Cut(rest, []byte("\n"))
		msg := bytes.TrimSpace(refused)
		var m sdkMessage
		readable := json.Unmarshal(msg, &m) == nil && (m.ID != nil || m.Method != "")
		if readable && !(m.ID != nil && m.Method != "" && requests == maxUnanswered) {
			t.Fatalf("refused %q (%v), a line the SDK reads as a message", msg, err)
		}
	})
}
