package acp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	sdk "github.com/coder/acp-go-sdk"
)

// What a delegated agent says outside its answer — its stderr, the message and data of a
// JSON-RPC error it answers, a line that is not ACP, the modes it offers — stays out of
// the run's errors. Those are journaled (session_finished, then the caller's terminated)
// and served to the run's callers whether or not its answer is released: an agent whose
// answer the respond gate withholds could hand it on through them, and its stderr may
// hold what it read of the server's environment. The words go to the server's log, under
// the executor's name, at level WARN; the error names their size and where they are.

// inLog is what an error says in place of the agent's words.
const inLog = "in the server's log"

// logWords writes the agent's words, which an error names as what, to the server's log.
func (r *runner) logWords(what, words string) {
	var name string
	if r.cfg.Executor != nil {
		name = r.cfg.Executor.Name
	}
	r.log().Warn("acp: the agent's own words, kept out of the run's error", "executor", name, "what", what, "words", cut(words, stderrBytes))
}

// sdkOwnData are the data the ACP SDK itself puts into the JSON-RPC errors it makes up
// (the peer gone, a request's context ended): its words, not the agent's.
var sdkOwnData = map[string]bool{
	"peer disconnected before response":                                   true,
	"peer disconnected while waiting for pre-response notifications":      true,
	"request context ended without cause":                                 true,
	"request context ended without cause while waiting for notifications": true,
}

// quiet returns err with the message and data of the JSON-RPC error in it — the agent's
// words — replaced by their size, and writes them to the log. A message that is the
// standard one of its code and data the SDK made up itself are kept.
func (r *runner) quiet(err error) error {
	var re *sdk.RequestError
	if !errors.As(err, &re) || re == nil {
		return err
	}
	std, known := standardMessages[re.Code]
	own := known && re.Message == std
	if own {
		if m, ok := re.Data.(map[string]any); ok && len(m) == 1 {
			s, ok := m["error"].(string)
			own = ok && sdkOwnData[s]
		} else if re.Data != nil {
			own = false
		}
	}
	if own {
		return err
	}
	words := re.Message
	if re.Data != nil {
		if b, merr := json.Marshal(re.Data); merr == nil {
			words += " " + string(b)
		}
	}
	r.logWords(fmt.Sprintf("JSON-RPC error %d", re.Code), words)
	name := ""
	if known {
		name = fmt.Sprintf(" (%s)", std)
	}
	return &rpcError{code: re.Code, name: name, size: len(words)}
}

// rpcError is a JSON-RPC error of the agent's, its words in the log.
type rpcError struct {
	code int
	name string
	size int
}

func (e *rpcError) Error() string {
	return fmt.Sprintf("JSON-RPC error %d%s; its message and data (%d bytes) are %s", e.code, e.name, e.size, inLog)
}

// standardMessages are JSON-RPC's and ACP's error codes with the message the ACP SDK
// gives each.
var standardMessages = map[int]string{
	-32700: "Parse error",
	-32600: "Invalid request",
	-32601: "Method not found",
	-32602: "Invalid params",
	-32603: "Internal error",
	-32800: "Request cancelled",
	-32000: "Authentication required",
}

// withStderr adds to err the size of the tail of the agent's stderr, written to the log.
func (r *runner) withStderr(err error) error {
	s := strings.TrimSpace(r.stderr.String())
	if s == "" {
		return err
	}
	r.logWords("stderr (its last bytes)", s)
	return fmt.Errorf("%w (the agent's stderr, its last %d bytes, is %s)", err, len(s), inLog)
}
