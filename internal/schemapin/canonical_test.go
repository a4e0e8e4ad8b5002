package schemapin_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"symbi/internal/errcode"
	"symbi/internal/schemapin"
)

func TestCanonicalize(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"sorted recursively", `{"b":1,"a":{"d":[{"z":0,"y":1}],"c":2}}`, `{"a":{"c":2,"d":[{"y":1,"z":0}]},"b":1}`},
		{"white space removed", " {\n\t\"a\" : [ 1 , 2 ] ,\r\n \"b\" : null } ", `{"a":[1,2],"b":null}`},
		{"numbers keep their text", `[1.0,1e2,-0,12345678901234567890123,1E-7]`, `[1.0,1e2,-0,12345678901234567890123,1E-7]`},
		{"literals", `[true,false,null]`, `[true,false,null]`},
		{"short escapes", `"\"\\\/\b\f\n\r\t"`, `"\"\\/\b\f\n\r\t"`},
		{"control characters", `"\u0001\u001F\u007f"`, "\"\\u0001\\u001f\x7f\""},
		{"non-ASCII kept as UTF-8", `"\u00e9\ud83d\ude00 é"`, "\"é😀 é\""},
		{"html characters not escaped", `"<&>\u2028"`, "\"<&>\u2028\""},
		{"key order is code point order", `{"é":1,"z":2,"😀":3,"\uffff":4,"A":5}`, "{\"A\":5,\"z\":2,\"é\":1,\"\uffff\":4,\"😀\":3}"},
		{"empty containers", `{"a":{},"b":[]}`, `{"a":{},"b":[]}`},
		{"scalar document", `"x"`, `"x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := schemapin.Canonicalize([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestCanonicalizeRejects(t *testing.T) {
	tests := []struct {
		name, in string
		code     errcode.Code
		msg      string
	}{
		{"empty", ``, errcode.InvalidRequest, "unexpected end"},
		{"duplicate key", `{"a":1,"b":{"c":1,"c":2}}`, errcode.InvalidRequest, `duplicate object key "c"`},
		{"invalid UTF-8", "\"\xff\"", errcode.InvalidRequest, "not valid UTF-8"},
		{"lone high surrogate", `"\ud83d"`, errcode.InvalidRequest, "lone surrogate"},
		{"lone low surrogate", `"\ude00"`, errcode.InvalidRequest, "lone surrogate"},
		{"high surrogate then non-surrogate", `"\ud83d\u0041"`, errcode.InvalidRequest, "lone surrogate"},
		{"trailing value", `{} {}`, errcode.InvalidRequest, "after the top-level value"},
		{"trailing garbage", `{}x`, errcode.InvalidRequest, ""},
		{"trailing comma", `[1,]`, errcode.InvalidRequest, ""},
		{"unquoted key", `{a:1}`, errcode.InvalidRequest, ""},
		{"truncated", `{"a":[1`, errcode.InvalidRequest, "unexpected end"},
		{"NaN", `[NaN]`, errcode.InvalidRequest, ""},
		{"too deep", strings.Repeat("[", schemapin.MaxDepth+1) + strings.Repeat("]", schemapin.MaxDepth+1), errcode.LimitExceeded, "deeper than 1000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := schemapin.Canonicalize([]byte(tt.in))
			if err == nil {
				t.Fatalf("accepted, canonical %q", out)
			}
			if !errors.Is(err, tt.code) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %q (code %s), want code %s containing %q", err, errcode.Of(err), tt.code, tt.msg)
			}
			if tt.code == errcode.InvalidRequest && !errors.Is(err, schemapin.ErrMalformed) {
				t.Fatalf("error %q does not wrap ErrMalformed", err)
			}
		})
	}
	deepest := strings.Repeat("[", schemapin.MaxDepth) + strings.Repeat("]", schemapin.MaxDepth)
	if _, err := schemapin.Canonicalize([]byte(deepest)); err != nil {
		t.Fatalf("depth %d refused: %v", schemapin.MaxDepth, err)
	}
}

func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[true,null,{"d":"x","c":1.50}]}`,
		`"\u00e9\ud83d\ude00\n\u0001"`,
		`{"a":1,"a":2}`,
		`[1e400,-0.0]`,
		"\"\xff\"",
		`"\ud800"`,
		`{} {}`,
		`{"signature":"MEUCIQ==","name":"t"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := schemapin.Canonicalize(in)
		if err != nil {
			if c := errcode.Of(err); c != errcode.InvalidRequest && c != errcode.LimitExceeded {
				t.Fatalf("error code %s: %v", c, err)
			}
			return
		}
		if !json.Valid(in) || !json.Valid(out) {
			t.Fatalf("accepted invalid JSON: in %q out %q", in, out)
		}
		again, err := schemapin.Canonicalize(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q (%v)", out, again, err)
		}
		if !reflect.DeepEqual(decode(t, in), decode(t, out)) {
			t.Fatalf("meaning changed: %q -> %q", in, out)
		}
	})
}

func decode(t *testing.T, b []byte) any {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return v
}

func ExampleCanonicalize() {
	out, err := schemapin.Canonicalize([]byte(`{
		"name": "echo",
		"inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}
	}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
	// Output: {"inputSchema":{"properties":{"text":{"type":"string"}},"type":"object"},"name":"echo"}
}
