package strictjson_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
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

// tokenCheck is the checker Check replaced, built on json.Decoder.Token: an oracle for
// Check's verdicts on valid JSON (FuzzAgainstTokens).
func tokenCheck(data []byte, opts strictjson.Options) error {
	type frame struct {
		members map[string]bool // nil for an array
		wantKey bool            // in an object: the next token is a member name
		key     string          // in an object: the member whose value is being read
		index   int             // in an array: the index of the next element
		step    string          // how the enclosing value reaches this one
	}
	var stack []*frame
	path := func() string {
		var b strings.Builder
		b.WriteString("$")
		for _, f := range stack {
			b.WriteString(f.step)
		}
		return b.String()
	}
	done := false
	// closed marks the value just read as complete.
	closed := func() {
		if n := len(stack); n == 0 {
			done = true
		} else if stack[n-1].members != nil {
			stack[n-1].wantKey = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if done && opts.Single {
			return strictjson.ErrTrailing
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
				return &strictjson.DuplicateError{Name: k, Path: path()}
			}
			for _, n := range opts.ExactNames {
				if k != n && strings.EqualFold(k, n) {
					return &strictjson.CaseError{Name: k, Want: n, Path: path()}
				}
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
		switch t := tok.(type) {
		case json.Delim: // '{' or '['
			f := &frame{step: step}
			if t == '{' {
				f.members, f.wantKey = map[string]bool{}, true
			}
			stack = append(stack, f)
		case json.Number:
			if opts.IntegersOnly && strings.ContainsAny(string(t), ".eE") {
				return fmt.Errorf("%w %s", strictjson.ErrFloat, t)
			}
			closed()
		default:
			closed()
		}
	}
}

var fuzzOptions = []strictjson.Options{
	{},
	{Single: true},
	{IntegersOnly: true, Single: true},
	{Single: true, ExactNames: []string{"id", "choices", "Kelvin", "long"}},
}

// FuzzAgainstTokens: on valid JSON, Check gives exactly the verdict of the Token-based
// checker it replaced, under every option set; on text json.Valid refuses, Check under
// Single refuses too, and it refuses as ErrSyntax only what json.Valid refuses.
func FuzzAgainstTokens(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"a":2}`, `{"a":{"b":[1,2,{"c":1,"c":2}]}}`, `{"x":1.5}`, `[1e3]`, `{"ID":1}`,
		`{"\u212Aelvin":1}`, `{"\u017fong":1}`, `{"\ud800":1,"\udc00":2}`, "{\"\xff\":1,\"\xfe\":2}",
		`{} {}`, `1 2`, ` `, ``, `{"a":}`, `[1,]`, `{"a" 1}`, `"\u12"`, `-`, `-01`, `1.`, `1e`, `tru`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"a":18}`,
		`{"k":[{"a":1},{"a":1,"b":{"a":1}}],"a":[],"k":0}`, "\"\x01\"", `[[[[]]]]`, `{"a":1}x`,
		`"\ud83d\ude00"`, `"\udc00"`, `["\ud800","\ud800\udc00"]`, `{"\\ud800":1}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		valid := json.Valid([]byte(data))
		for _, opts := range fuzzOptions {
			got := strictjson.Check([]byte(data), opts)
			if errors.Is(got, strictjson.ErrSyntax) && valid {
				t.Fatalf("%q %+v: valid JSON refused as %v", data, opts, got)
			}
			if !valid {
				if opts.Single && got == nil {
					t.Fatalf("%q %+v: json.Valid refuses it, Check accepts it", data, opts)
				}
				continue
			}
			want := tokenCheck([]byte(data), opts)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%q %+v: Check says %v, the Token checker %v", data, opts, got, want)
			}
		}
		// NoLoneSurrogates refuses where the scan does, and otherwise changes nothing.
		if valid {
			plain := strictjson.Check([]byte(data), strictjson.Options{Single: true})
			got := strictjson.Check([]byte(data), strictjson.Options{Single: true, NoLoneSurrogates: true})
			lone := scanSurrogates([]byte(data)) != nil
			switch {
			case errors.Is(got, strictjson.ErrSurrogate) && !lone:
				t.Fatalf("%q: a lone surrogate the scan does not see: %v", data, got)
			case lone && plain == nil && !errors.Is(got, strictjson.ErrSurrogate):
				t.Fatalf("%q: the scan sees a lone surrogate, Check says %v", data, got)
			case !errors.Is(got, strictjson.ErrSurrogate) && fmt.Sprint(got) != fmt.Sprint(plain):
				t.Fatalf("%q: NoLoneSurrogates changed the verdict %v to %v", data, plain, got)
			}
		}
	})
}

func TestSyntax(t *testing.T) {
	for _, s := range []string{
		``, ` `, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{,}`, `[1,]`, `[,1]`, `[1 2]`, `{"a":1 "b":2}`,
		`{1:2}`, `"abc`, "\"a\x1fb\"", `"\x"`, `"\u12g4"`, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`,
		`tru`, `nul`, `falsey`, `[true false]`, `{"a":1}}`, `]`, `NaN`, `[1]x`,
		strings.Repeat("[", strictjson.MaxDepth+1) + strings.Repeat("]", strictjson.MaxDepth+1),
	} {
		if json.Valid([]byte(s)) {
			t.Fatalf("%q: the test expects text json.Valid refuses", s)
		}
		if err := strictjson.Check([]byte(s), strictjson.Options{Single: true}); err == nil {
			t.Errorf("%q: accepted", s)
		}
	}
	deep := strings.Repeat("[", strictjson.MaxDepth) + strings.Repeat("]", strictjson.MaxDepth)
	if err := strictjson.Check([]byte(deep), strictjson.Options{Single: true}); err != nil || !json.Valid([]byte(deep)) {
		t.Errorf("nesting of exactly MaxDepth: %v", err)
	}
}

func TestManyMembers(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range 1000 {
		fmt.Fprintf(&b, `"m%d":{"m%d":[%d]},`, i, i, i)
	}
	b.WriteString(`"m0":0}`)
	var de *strictjson.DuplicateError
	if err := strictjson.Check([]byte(b.String()), strictjson.Options{}); !errors.As(err, &de) || de.Name != "m0" || de.Path != "$" {
		t.Fatalf("the 1,001st member repeats the first: %v", err)
	}
}

func TestMaxDepth(t *testing.T) {
	nest := func(n int) []byte { return []byte(strings.Repeat(`{"a":[`, n/2) + strings.Repeat(`]}`, n/2)) }
	tests := []struct {
		doc   []byte
		depth int
		deep  bool
	}{
		{nest(1000), 1000, false},
		{nest(1002), 1000, true},
		{nest(1002), 0, false},
		{nest(strictjson.MaxDepth), 0, false},
		{nest(strictjson.MaxDepth + 2), 0, true},
		{nest(strictjson.MaxDepth + 2), 2 * strictjson.MaxDepth, true}, // never above json.Valid's
		{[]byte(`[[1]]`), 1, true},
		{[]byte(`["[[[[","{{{{"]`), 1, false}, // brackets in strings are text
	}
	for _, tt := range tests {
		err := strictjson.Check(tt.doc, strictjson.Options{Single: true, MaxDepth: tt.depth})
		if errors.Is(err, strictjson.ErrDepth) != tt.deep || (!tt.deep && err != nil) {
			t.Errorf("%.20s… (%d bytes) MaxDepth %d: %v, want deep %v", tt.doc, len(tt.doc), tt.depth, err, tt.deep)
		}
	}
}

func TestNoValue(t *testing.T) {
	for _, s := range []string{"", " ", "\n\t "} {
		for _, opts := range []strictjson.Options{{}, {Single: true}} {
			if err := strictjson.Check([]byte(s), opts); !errors.Is(err, strictjson.ErrSyntax) {
				t.Errorf("%q %+v: %v, want ErrSyntax (no value)", s, opts, err)
			}
		}
	}
}

// TestPairsAllocateNothing: a valid surrogate pair costs no error built in vain.
func TestPairsAllocateNothing(t *testing.T) {
	doc := []byte(`["` + strings.Repeat(`\ud83d\ude00`, 100) + `"]`)
	opts := strictjson.Options{Single: true, NoLoneSurrogates: true}
	if err := strictjson.Check(doc, opts); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(20, func() { strictjson.Check(doc, opts) }); n > 0 {
		t.Errorf("%v allocations checking 100 valid pairs", n)
	}
}

func BenchmarkCheck(b *testing.B) {
	line := []byte(`{"v":1,"run":"0b6c1f0e-6f0a-4d5e-9a43-3f1c2b7d9e10","seq":3,"time":"2026-12-01T15:16:47.123456789Z","type":"inference_finished","prev":"9f2a6c0d4b1e8a7f3c5d2e1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f","data":{"status":200,"body_sha256":"4b1e8a7f3c5d2e1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f9f2a6c0d","bytes":412,"finish_reason":"stop","usage":{"prompt_tokens":31,"completion_tokens":12},"text":"echo: answer me"}}`)
	opts := strictjson.Options{IntegersOnly: true, Single: true}
	b.Run("scanner", func(b *testing.B) {
		for b.Loop() {
			if err := strictjson.Check(line, opts); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tokens", func(b *testing.B) {
		for b.Loop() {
			if err := tokenCheck(line, opts); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// scanSurrogates (the scan schemapin used before NoLoneSurrogates) rejects \u escapes that encode a lone UTF-16 surrogate, which the
// standard decoder would silently replace with U+FFFD. Outside strings a backslash is
// a syntax error the decoder reports, so scanning every backslash is enough.
func scanSurrogates(doc []byte) error {
	for i := 0; i < len(doc); i++ {
		if doc[i] != '\\' || i+1 >= len(doc) {
			continue
		}
		i++
		if doc[i] != 'u' {
			continue
		}
		r, ok := hex4(doc, i+1)
		if !ok {
			continue // the decoder reports the bad escape
		}
		i += 4
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return fmt.Errorf("lone surrogate %04x", r)
		case r >= 0xD800 && r <= 0xDBFF:
			lo, ok := -1, i+2 < len(doc) && doc[i+1] == '\\' && doc[i+2] == 'u'
			if ok {
				lo, ok = hex4(doc, i+3)
			}
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return fmt.Errorf("lone surrogate %04x", r)
			}
			i += 6
		}
	}
	return nil
}

func hex4(b []byte, at int) (int, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	n := 0
	for _, c := range b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int(c-'A'+10)
		default:
			return 0, false
		}
	}
	return n, true
}

func TestLoneSurrogates(t *testing.T) {
	tests := []struct {
		json string
		lone bool
	}{
		{`"\ud83d\ude00"`, false}, // a pair
		{`"\uD83D\uDE00"`, false},
		{`"\ud800"`, true},
		{`"\udc00"`, true},
		{`"\udc00\ud800"`, true}, // halves in the wrong order
		{`"\ud800\ud800"`, true},
		{`"\ud800x"`, true},
		{`"\ud800\n"`, true},
		{`"\\ud800"`, false},   // an escaped backslash, then text
		{`{"\ud800":1}`, true}, // in a name too
		{`["\u0041","\uffff","\ufffd"]`, false},
	}
	for _, tt := range tests {
		err := strictjson.Check([]byte(tt.json), strictjson.Options{Single: true, NoLoneSurrogates: true})
		if got := errors.Is(err, strictjson.ErrSurrogate); got != tt.lone || (!tt.lone && err != nil) {
			t.Errorf("%s: %v, want lone %v", tt.json, err, tt.lone)
		}
		if (scanSurrogates([]byte(tt.json)) != nil) != tt.lone {
			t.Errorf("%s: the oracle disagrees with the table", tt.json)
		}
		if err := strictjson.Check([]byte(tt.json), strictjson.Options{Single: true}); err != nil {
			t.Errorf("%s without NoLoneSurrogates: %v", tt.json, err)
		}
	}
}

// TestNamesOf: the member names a type reads, through pointers, slices, map values and
// nested structs, once each type; untagged and "-" fields are not named.
func TestNamesOf(t *testing.T) {
	type inner struct {
		B string `json:"b,omitempty"`
		C int    `json:"-"`
		D int
	}
	type outer struct {
		A  *inner            `json:"a"`
		M  map[string]inner  `json:"m"`
		S  []map[string]*int `json:"s"`
		Me *outer            `json:"me"`
	}
	got := strictjson.NamesOf(reflect.TypeFor[outer]())
	if want := []string{"a", "b", "m", "s", "me"}; !slices.Equal(got, want) {
		t.Fatalf("NamesOf = %q, want %q", got, want)
	}
}
