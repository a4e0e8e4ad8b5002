package strictjson_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"symbi/internal/strictjson"
)

func TestDuplicates(t *testing.T) {
	tests := []struct {
		json, name, path string // path "" means no duplicate
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
		err := strictjson.Check([]byte(tt.json), strictjson.Options{})
		var de *strictjson.DuplicateError
		if tt.path == "" {
			if err != nil {
				t.Errorf("%s: %v, want no problem", tt.json, err)
			}
			continue
		}
		if !errors.As(err, &de) || de.Name != tt.name || de.Path != tt.path {
			t.Errorf("%s: %v, want duplicate %q at %s", tt.json, err, tt.name, tt.path)
		}
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		json string
		opts strictjson.Options
		want error // nil: no problem
	}{
		{`{"x":1.5}`, strictjson.Options{IntegersOnly: true}, strictjson.ErrFloat},
		{`{"x":[1e3]}`, strictjson.Options{IntegersOnly: true}, strictjson.ErrFloat},
		{`{"x":-2E1}`, strictjson.Options{IntegersOnly: true}, strictjson.ErrFloat},
		{`{"x":1.5}`, strictjson.Options{}, nil},
		{`{"x":-12}`, strictjson.Options{IntegersOnly: true}, nil},
		{`{"x":"1.5"}`, strictjson.Options{IntegersOnly: true}, nil},
		{`{} {}`, strictjson.Options{Single: true}, strictjson.ErrTrailing},
		{`1 2`, strictjson.Options{Single: true}, strictjson.ErrTrailing},
		{`{} {}`, strictjson.Options{}, nil},
	}
	for _, tt := range tests {
		err := strictjson.Check([]byte(tt.json), tt.opts)
		if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("%s %+v: %v, want %v", tt.json, tt.opts, err, tt.want)
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

// FuzzCheck: on valid JSON, Check and the oracle agree on whether a name is repeated and
// which.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_agents","name":"invoke_agent"}}`,
		`{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}`,
		`{"a":[{"k":1},{"k":1,"k":2}]}`,
		`[[],{"p":{"q":[1,{"r":0,"r":1}]}}]`,
		`{"\u0061":1,"a":2}`,
		`{"a":{"b":{"c":{}}},"d":[[[]]]}`,
		`{"x":1.5e3}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		if !json.Valid([]byte(data)) {
			return
		}
		err := strictjson.Check([]byte(data), strictjson.Options{})
		var de *strictjson.DuplicateError
		dup := errors.As(err, &de)
		if err != nil && !dup {
			t.Fatalf("%q: valid JSON refused for another reason: %v", data, err)
		}
		want, wantDup := repeatedName(json.RawMessage(data))
		if dup != wantDup || (dup && de.Name != want) {
			t.Fatalf("%q: Check says %v, oracle %q (dup %v)", data, err, want, wantDup)
		}
	})
}
