package schemapin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf8"

	"symbi/internal/errcode"
	"symbi/internal/strictjson"
)

// MaxDepth is the deepest nesting of arrays and objects Canonicalize accepts.
const MaxDepth = 1000

// ErrMalformed is wrapped by every error that rejects a document as malformed JSON.
var ErrMalformed = errors.New("malformed JSON")

// object is a decoded JSON object; keys are unique.
type object map[string]any

// Canonicalize returns the canonical form of the JSON document doc (see the package
// comment). Errors carry errcode.InvalidRequest (malformed input, wrapping ErrMalformed)
// or errcode.LimitExceeded (nesting deeper than MaxDepth).
func Canonicalize(doc []byte) ([]byte, error) {
	v, err := parse(doc)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	encode(&b, v)
	return b.Bytes(), nil
}

// parse decodes doc strictly: valid UTF-8, no escaped lone surrogates, no duplicate
// keys, exactly one value, numbers kept as their literal text (json.Number).
func parse(doc []byte) (any, error) {
	if !utf8.Valid(doc) {
		return nil, malformed("document is not valid UTF-8")
	}
	// The standard decoder would read a lone surrogate's escape as U+FFFD.
	if err := strictjson.Check(doc, strictjson.Options{NoLoneSurrogates: true}); errors.Is(err, strictjson.ErrSurrogate) {
		return nil, malformed("%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	v, err := parseValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, malformed("data after the top-level value")
	}
	return v, nil
}

func malformed(format string, args ...any) error {
	return errcode.Errorf(errcode.InvalidRequest, "%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

func syntax(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return malformed("unexpected end of document")
	}
	return malformed("%v", err)
}

func parseValue(dec *json.Decoder, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, syntax(err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil // string, json.Number, bool or nil
	}
	if depth >= MaxDepth {
		return nil, errcode.Errorf(errcode.LimitExceeded, "document nests deeper than %d levels", MaxDepth)
	}
	switch d {
	case '[':
		arr := []any{}
		for dec.More() {
			v, err := parseValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		if _, err := dec.Token(); err != nil {
			return nil, syntax(err)
		}
		return arr, nil
	case '{':
		obj := object{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, syntax(err)
			}
			key, ok := tok.(string)
			if !ok {
				return nil, malformed("object key is not a string")
			}
			if _, dup := obj[key]; dup {
				return nil, malformed("duplicate object key %q", key)
			}
			v, err := parseValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			obj[key] = v
		}
		if _, err := dec.Token(); err != nil {
			return nil, syntax(err)
		}
		return obj, nil
	}
	return nil, malformed("unexpected %q", d)
}

// encode writes v in canonical form.
func encode(b *bytes.Buffer, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case json.Number:
		b.WriteString(string(v))
	case string:
		encodeString(b, v)
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			encode(b, e)
		}
		b.WriteByte(']')
	case object:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			encodeString(b, k)
			b.WriteByte(':')
			encode(b, v[k])
		}
		b.WriteByte('}')
	default:
		panic(fmt.Sprintf("schemapin: unexpected value %T", v))
	}
}

// encodeString writes s as a JSON string the way Python's
// json.dumps(ensure_ascii=False) and JavaScript's JSON.stringify do.
func encodeString(b *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\f':
			b.WriteString(`\f`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xF])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// splitSignature parses a schema document, which must be a JSON object, and returns the
// canonical bytes that are signed and the signature the document holds ("" when none).
//
// A document in SchemaPin's signed-schema file form — its members "schema" (an object),
// "signature" (a string) and at most "signed_at" and "metadata" besides, nothing else — is
// signed over its "schema" member alone (what SchemaPin's signer writes and its verifier
// reads); signedFile says so. Any other document's top-level "signature" member (which
// must be a string when present) is removed, and the rest is what is signed.
func splitSignature(doc []byte) (canonical []byte, sig string, hasSig, signedFile bool, err error) {
	v, err := parse(doc)
	if err != nil {
		return nil, "", false, false, err
	}
	obj, ok := v.(object)
	if !ok {
		return nil, "", false, false, errcode.Errorf(errcode.InvalidRequest, "schema is not a JSON object")
	}
	if s, present := obj["signature"]; present {
		str, ok := s.(string)
		if !ok {
			return nil, "", false, false, errcode.Errorf(errcode.InvalidRequest, `schema field "signature" is not a string`)
		}
		delete(obj, "signature")
		sig, hasSig = strings.TrimSpace(str), true
	}
	var signed any = obj
	if inner, ok := signedSchema(obj); ok && hasSig {
		signed, signedFile = inner, true
	}
	var b bytes.Buffer
	encode(&b, signed)
	return b.Bytes(), sig, hasSig, signedFile, nil
}

// signedSchema returns the "schema" member of obj (a document without its "signature")
// when obj is the rest of a SchemaPin signed-schema file: "schema", an object, and no
// members but "signed_at" and "metadata" besides.
func signedSchema(obj object) (object, bool) {
	inner, ok := obj["schema"].(object)
	if !ok {
		return nil, false
	}
	for k := range obj {
		switch k {
		case "schema", "signed_at", "metadata":
		default:
			return nil, false
		}
	}
	return inner, true
}
