package mcpserver_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"symbi/internal/mcpserver"
)

func TestDuplicateMember(t *testing.T) {
	tests := []struct {
		json, name, path string // name "" means no duplicate
	}{
		{`{"a":1,"b":2}`, "", ""},
		{`{"a":1,"a":2}`, "a", "$"},
		{`{"a":{"x":1},"b":{"x":1}}`, "", ""},
		{`{"params":{"name":"list_agents","name":"invoke_agent"}}`, "name", "$.params"},
		{`{"a":[{"k":1},{"k":1,"k":2}]}`, "k", "$.a[1]"},
		{`[[],{"p":{"q":[1,{"r":0,"r":1}]}}]`, "r", "$[1].p.q[1]"},
		{`{"a":"x","b":{"a":"y"}}`, "", ""},
		{`{"\u0061":1,"a":2}`, "a", "$"}, // the same name, escaped
		{`{"a":1,"A":2}`, "", ""},        // names are case-sensitive
		{`{"":1,"":2}`, "", "$"},
		{`"str"`, "", ""},
		{`[1,2,3]`, "", ""},
		{`{"a":[],"b":{},"c":null,"a":0}`, "a", "$"},
	}
	for _, tt := range tests {
		name, path, dup := mcpserver.DuplicateMember([]byte(tt.json))
		wantDup := tt.name != "" || tt.path != ""
		if dup != wantDup || name != tt.name || path != tt.path {
			t.Errorf("%s: got %q at %q (dup %v), want %q at %q (dup %v)", tt.json, name, path, dup, tt.name, tt.path, wantDup)
		}
	}
}

// repeatedName is an independent oracle: it walks the value recursively, one level at a
// time through json.RawMessage, and returns the first repeated member name.
func repeatedName(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || (raw[0] != '{' && raw[0] != '[') {
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.Token() // the opening delimiter
	seen := map[string]bool{}
	for dec.More() {
		if raw[0] == '{' {
			tok, _ := dec.Token()
			k := tok.(string)
			if seen[k] {
				return k, true
			}
			seen[k] = true
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			panic(fmt.Sprintf("oracle on valid JSON: %v", err))
		}
		if k, ok := repeatedName(v); ok {
			return k, true
		}
	}
	return "", false
}

// FuzzDuplicateMember: on valid JSON, the screen and the oracle agree on whether a name
// is repeated and which.
func FuzzDuplicateMember(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_agents","name":"invoke_agent"}}`,
		`{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}`,
		`{"a":[{"k":1},{"k":1,"k":2}]}`,
		`[[],{"p":{"q":[1,{"r":0,"r":1}]}}]`,
		`{"\u0061":1,"a":2}`,
		`{"a":{"b":{"c":{}}},"d":[[[]]]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		if !json.Valid([]byte(data)) {
			return
		}
		name, _, dup := mcpserver.DuplicateMember([]byte(data))
		want, wantDup := repeatedName(json.RawMessage(data))
		if dup != wantDup || (dup && name != want) {
			t.Fatalf("%q: screen says %q (dup %v), oracle %q (dup %v)", data, name, dup, want, wantDup)
		}
	})
}
