package strictjson_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"symbi/internal/strictjson"
)

// checkVerdicts runs Check under opts on each text and fails the test when its verdict
// differs: want nil means accepted, otherwise the error must wrap want (or be of its
// type, for *DuplicateError and *CaseError).
func checkVerdicts(t *testing.T, opts strictjson.Options, cases map[string]error) {
	t.Helper()
	for text, want := range cases {
		got := strictjson.Check([]byte(text), opts)
		switch w := want.(type) {
		case nil:
			if got != nil {
				t.Errorf("%q %+v: %v, want accepted", text, opts, got)
			}
		case *strictjson.DuplicateError:
			var de *strictjson.DuplicateError
			if !errors.As(got, &de) || de.Name != w.Name || de.Path != w.Path {
				t.Errorf("%q %+v: %v, want duplicate %q at %s", text, opts, got, w.Name, w.Path)
			}
		case *strictjson.CaseError:
			var ce *strictjson.CaseError
			if !errors.As(got, &ce) || ce.Name != w.Name || ce.Want != w.Want {
				t.Errorf("%q %+v: %v, want %q refused as %q spelled otherwise", text, opts, got, w.Name, w.Want)
			}
		default:
			if !errors.Is(got, want) {
				t.Errorf("%q %+v: %v, want %v", text, opts, got, want)
			}
		}
	}
}

// TestWhitespace: exactly the four JSON whitespace bytes (space, tab, LF, CR) may
// separate tokens; a form feed or vertical tab is not JSON and is refused as syntax.
func TestWhitespace(t *testing.T) {
	checkVerdicts(t, strictjson.Options{Single: true}, map[string]error{
		"\r\n[1,\r2,\t3 ,\n4]\r\n": nil,
		"{\"a\"\r:\r1}":            nil,
		"[1,\f2]":                  strictjson.ErrSyntax,
		"\f{}":                     strictjson.ErrSyntax,
		"[1,\v2]":                  strictjson.ErrSyntax,
	})
}

// TestSpaceAfterComma: whitespace between a comma and the next member name of an
// object is read as whitespace, so pretty-printed objects are accepted.
func TestSpaceAfterComma(t *testing.T) {
	checkVerdicts(t, strictjson.Options{Single: true}, map[string]error{
		`{"a":1, "b":2}`:        nil,
		"{\"a\":1,\n\t\"b\":2}": nil,
		`{"a":1, "a":2}`:        &strictjson.DuplicateError{Name: "a", Path: "$"},
	})
}

// TestBracketsMatch: an array closes only with ']' and an object only with '}'; a
// mismatched closer is a syntax error, never a value accepted.
func TestBracketsMatch(t *testing.T) {
	for _, text := range []string{`[1}`, `{"a":1]`, `[{"a":1]}`, `{"a":[1}}`, `[[]}`, `{"a":{}]`} {
		if json.Valid([]byte(text)) {
			t.Fatalf("%q: the test expects text json.Valid refuses", text)
		}
		for _, opts := range []strictjson.Options{{}, {Single: true}} {
			if err := strictjson.Check([]byte(text), opts); !errors.Is(err, strictjson.ErrSyntax) {
				t.Errorf("%q %+v: %v, want ErrSyntax", text, opts, err)
			}
		}
	}
}

// TestMemberSyntax: a member name must open with a quote and be followed by a colon;
// text that only resembles a member is refused as syntax.
func TestMemberSyntax(t *testing.T) {
	checkVerdicts(t, strictjson.Options{Single: true}, map[string]error{
		`{a":1}`:        strictjson.ErrSyntax,
		`{"a":1,b":2}`:  strictjson.ErrSyntax,
		`{"a"=1}`:       strictjson.ErrSyntax,
		`{"a" x1}`:      strictjson.ErrSyntax,
		`{"a":1,"b";2}`: strictjson.ErrSyntax,
	})
}

// TestExactNames: a member spelled exactly as an ExactNames name is accepted; one
// equal to it only under Unicode simple case folding (as encoding/json matches fields:
// U+017F LONG S folds to "s", U+212A KELVIN SIGN to "k") is refused.
func TestExactNames(t *testing.T) {
	opts := strictjson.Options{Single: true, ExactNames: []string{"song", "kind", "id"}}
	checkVerdicts(t, opts, map[string]error{
		`{"song":1,"kind":2,"id":3}`: nil,
		`{"x":{"id":1}}`:             nil,
		`{"\u017fong":1}`:            &strictjson.CaseError{Name: "\u017fong", Want: "song"},
		`{"SONG":1}`:                 &strictjson.CaseError{Name: "SONG", Want: "song"},
		`{"\u212Aind":1}`:            &strictjson.CaseError{Name: "\u212Aind", Want: "kind"},
		`{"x":{"Id":1}}`:             &strictjson.CaseError{Name: "Id", Want: "id"},
	})
}

// TestDuplicateAfterSwitch: in an object with more members than are compared one by
// one, a repetition of any member is found — the first, the one that made the object
// switch to a set, and the ones after it.
func TestDuplicateAfterSwitch(t *testing.T) {
	for _, n := range []int{15, 16, 17, 18, 40} {
		for _, rep := range []int{0, n / 2, n - 1} {
			var b strings.Builder
			b.WriteString("{")
			for i := range n {
				fmt.Fprintf(&b, `"m%d":%d,`, i, i)
			}
			fmt.Fprintf(&b, `"m%d":0}`, rep)
			want := &strictjson.DuplicateError{Name: fmt.Sprintf("m%d", rep), Path: "$"}
			checkVerdicts(t, strictjson.Options{Single: true}, map[string]error{b.String(): want})
		}
	}
}

// TestInvalidUTF8Names: member names are compared as encoding/json decodes them, each
// invalid UTF-8 byte read as U+FFFD — a lone 0x80 byte included — so two names that
// decode alike are a duplicate.
func TestInvalidUTF8Names(t *testing.T) {
	checkVerdicts(t, strictjson.Options{Single: true}, map[string]error{
		"{\"\x80\":1,\"\xff\":2}":        &strictjson.DuplicateError{Name: "\uFFFD", Path: "$"},
		"{\"\x80\":1,\"\\ufffd\":2}":     &strictjson.DuplicateError{Name: "\uFFFD", Path: "$"},
		"{\"a\x80\":1,\"a\xc0\":2}":      &strictjson.DuplicateError{Name: "a\uFFFD", Path: "$"},
		"{\"\xc3\xa9\":1,\"\\u00e9\":2}": &strictjson.DuplicateError{Name: "é", Path: "$"},
	})
}

// TestEscapes: the escapes of RFC 8259 are read, "\/" among them; any other escaped
// character is refused as syntax.
func TestEscapes(t *testing.T) {
	checkVerdicts(t, strictjson.Options{Single: true}, map[string]error{
		`["\/","\"","\\","\b","\f","\n","\r","\t","\u0041"]`: nil,
		`{"a\/b":1,"a/b":2}`: &strictjson.DuplicateError{Name: "a/b", Path: "$"},
		`"\v"`:               strictjson.ErrSyntax,
		`"\a"`:               strictjson.ErrSyntax,
		`"\'"`:               strictjson.ErrSyntax,
		`"\U0041"`:           strictjson.ErrSyntax,
	})
}

// TestHexDigits: a \u escape takes its four digits in either case, a to f and A to F
// included, and decodes them to the right value: a surrogate spelled in capitals is a
// surrogate.
func TestHexDigits(t *testing.T) {
	opts := strictjson.Options{Single: true, NoLoneSurrogates: true}
	checkVerdicts(t, opts, map[string]error{
		`["\u00aa\u00AA\u00af\u00AF\u00Fa\u00fA\u00ff\u00FF"]`: nil,
		`{"\u00AA":1,"\u00aa":2}`:                              &strictjson.DuplicateError{Name: "\u00aa", Path: "$"},
		`"\uD800"`:                                             strictjson.ErrSurrogate,
		`"\uDBFF"`:                                             strictjson.ErrSurrogate,
		`"\uDC00"`:                                             strictjson.ErrSurrogate,
		`"\uDBFF\uDFFF"`:                                       nil,
		`"\uD800\uDC00"`:                                       nil,
	})
}

// TestSurrogateBounds: under NoLoneSurrogates the whole range U+D800..U+DFFF is a
// surrogate; a pair is a high half (D800..DBFF) then a low half (DC00..DFFF), both ends
// of each range included; a low half first, or twice, is lone.
func TestSurrogateBounds(t *testing.T) {
	opts := strictjson.Options{Single: true, NoLoneSurrogates: true}
	checkVerdicts(t, opts, map[string]error{
		`"\ud800\udc00"`: nil,
		`"\ud800\udfff"`: nil,
		`"\udbff\udc00"`: nil,
		`"\udbff\udfff"`: nil,
		`"\ud7ff\ue000"`: nil,
		`"\udfff"`:       strictjson.ErrSurrogate,
		`"\udc00\udc00"`: strictjson.ErrSurrogate,
		`"\udfff\udfff"`: strictjson.ErrSurrogate,
		`"\udc01\udc00"`: strictjson.ErrSurrogate,
		`"\ud800\udbff"`: strictjson.ErrSurrogate,
		`"\ud800\ue000"`: strictjson.ErrSurrogate,
	})
}

// TestTruncated: text cut anywhere — inside an array or object, after a colon or a
// comma, in an escape, in a \u escape, after a high surrogate's escape, in a number's
// fraction or exponent — is refused as an error, never read past its end.
func TestTruncated(t *testing.T) {
	for _, text := range []string{
		`[`, `{`, `{"a":`, `[1,`, `{"a":1,`, `"\`, `"\u`, `"\u12`, `["\ud800\`, `"\ud800\`, `"\ud800\u`, `"\ud800\udc`,
		`[1.]`, `[1.}`, `{"a":1.}`, `[1e]`, `[1e+]`, `[1E-]`, `[-]`, `[1.e5]`,
	} {
		for _, opts := range []strictjson.Options{{}, {Single: true, NoLoneSurrogates: true}} {
			err := func() (err error) {
				defer func() {
					if r := recover(); r != nil {
						err = fmt.Errorf("panic: %v", r)
					}
				}()
				return strictjson.Check([]byte(text), opts)
			}()
			if !errors.Is(err, strictjson.ErrSyntax) && !errors.Is(err, strictjson.ErrSurrogate) {
				t.Errorf("%q %+v: %v, want a syntax or surrogate error", text, opts, err)
			}
		}
	}
}

// TestExponentSign: an exponent may carry a sign, "-" as well as "+": such a number is
// JSON (and a float under IntegersOnly, not a syntax error).
func TestExponentSign(t *testing.T) {
	checkVerdicts(t, strictjson.Options{Single: true}, map[string]error{
		`[1e-5,1E+5,1e5,-0.5e-0,2E-10]`: nil,
	})
	checkVerdicts(t, strictjson.Options{Single: true, IntegersOnly: true}, map[string]error{
		`[1e-5]`: strictjson.ErrFloat,
		`[1E-5]`: strictjson.ErrFloat,
	})
}

// TestLiterals: true, false and null are read letter by letter; a word of the same
// length that differs is refused.
func TestLiterals(t *testing.T) {
	checkVerdicts(t, strictjson.Options{Single: true}, map[string]error{
		`[true,false,null]`: nil,
		`[trux]`:            strictjson.ErrSyntax,
		`[fals3]`:           strictjson.ErrSyntax,
		`[nulL]`:            strictjson.ErrSyntax,
		`{"a":tRUE}`:        strictjson.ErrSyntax,
	})
}

// TestNamesOfArray: NamesOf reads through arrays as through slices: the names of a
// struct held in a fixed-size array are named.
func TestNamesOfArray(t *testing.T) {
	type elem struct {
		X int `json:"x"`
	}
	type holder struct {
		Pair [2]elem `json:"pair"`
	}
	if got, want := strictjson.NamesOf(reflect.TypeFor[holder]()), []string{"pair", "x"}; !slices.Equal(got, want) {
		t.Fatalf("NamesOf = %q, want %q", got, want)
	}
}
