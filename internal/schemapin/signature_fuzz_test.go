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
// (nested ones stay) — or, for a document in the signed-schema file form, its "schema"
// member —, and the signature is that member's string, trimmed — as the package comment
// documents.
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
		`{"schema":{"name":"t"},"signature":"MEUCIQ==","signed_at":"2025-06-01T12:00:00+00:00"}`,
		`{"schema":{"name":"t"},"signature":"x","signed_at":1,"metadata":{"k":"v"}}`,
		`{"schema":{"name":"t"},"signature":"x","extra":1}`,
		`{"schema":{"name":"t"},"signed_at":"now"}`,
		`{"schema":[1],"signature":"x"}`,
		`[{"signature":"x"}]`,
		`"signature"`,
		`{"b":1.50,"a":[1e2,-0],"<>&":"\u2028"}`,
		`{} {}`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		canonical, sig, hasSig, signedFile, err := splitSignature(doc)
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
		// The signed-schema file form: a signature, an object "schema", and no members but
		// "signed_at" and "metadata" besides; the "schema" member is what is signed.
		fileForm := present && len(m["schema"]) > 0 && m["schema"][0] == '{'
		for k := range m {
			fileForm = fileForm && (k == "schema" || k == "signed_at" || k == "metadata")
		}
		if signedFile != fileForm {
			t.Fatalf("%q: read as a signed-schema file %v, want %v", doc, signedFile, fileForm)
		}
		if fileForm {
			rest = m["schema"]
		}
		want, werr := Canonicalize(rest)
		if werr != nil || !bytes.Equal(canonical, want) {
			t.Fatalf("%q: signed bytes %q, want %q (%v)", doc, canonical, want, werr)
		}
		if hasSig != present || sig != strings.TrimSpace(s) {
			t.Fatalf("%q: signature %q (%v), the member is %s", doc, sig, hasSig, raw)
		}
	})
}
