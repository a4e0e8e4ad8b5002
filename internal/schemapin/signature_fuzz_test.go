package schemapin

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"symbi/internal/errcode"
)

// FuzzSplitSignature: verify_schema's schema argument is any text. splitSignature never
// panics; it refuses what Canonicalize refuses, anything but an object, and a signature
// member that is not a string (invalid_request or limit_exceeded); otherwise the signed
// bytes are the canonical form of the object without its top-level "signature" member
// (nested ones stay), and the signature is that member's string, trimmed — as the package
// comment documents.
func FuzzSplitSignature(f *testing.F) {
	for _, s := range []string{
		`{"name":"t","signature":"MEUCIQ=="}`,
		`{"name":"t","signature":" MEUCIQ==\n"}`,
		`{"name":"t"}`,
		`{"signature":1}`,
		`{"signature":null}`,
		`{"signature":"a","signature":"b"}`,
		`{"sig\u006eature":"x","a":1}`,
		`{"Signature":"x"}`,
		`{"a":{"signature":"nested"},"signature":"top"}`,
		`[{"signature":"x"}]`,
		`"signature"`,
		`{"b":1.50,"a":[1e2,-0],"<>&":"\u2028"}`,
		`{} {}`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		canonical, sig, hasSig, err := splitSignature(doc)
		whole, cerr := Canonicalize(doc)
		if cerr != nil {
			if err == nil {
				t.Fatalf("%q: Canonicalize refuses it (%v), splitSignature accepts it", doc, cerr)
			}
			return
		}
		var m map[string]json.RawMessage
		isObject := bytes.HasPrefix(whole, []byte("{")) && json.Unmarshal(whole, &m) == nil
		raw, present := m["signature"]
		var s string
		isString := present && len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil
		if !isObject || present && !isString {
			if err == nil {
				t.Fatalf("%q: accepted (object %v, signature %s)", doc, isObject, raw)
			}
			if c := errcode.Of(err); c != errcode.InvalidRequest && c != errcode.LimitExceeded {
				t.Fatalf("%q: refused with code %s: %v", doc, c, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: refused: %v", doc, err)
		}
		delete(m, "signature")
		rest, _ := json.Marshal(m)
		want, werr := Canonicalize(rest)
		if werr != nil || !bytes.Equal(canonical, want) {
			t.Fatalf("%q: signed bytes %q, want %q (%v)", doc, canonical, want, werr)
		}
		if hasSig != present || sig != strings.TrimSpace(s) {
			t.Fatalf("%q: signature %q (%v), the member is %s", doc, sig, hasSig, raw)
		}
	})
}
