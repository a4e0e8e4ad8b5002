package schemapin_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"symbi/internal/schemapin"
)

// TestToolSchemas checks that Request and Result can serve as the verify_schema tool's
// input and output types: their JSON schemas derive, with schema the only required input.
func TestToolSchemas(t *testing.T) {
	in, err := jsonschema.For[schemapin.Request](nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(in.Required, []string{"schema"}) {
		t.Fatalf("input required = %v, want [schema]", in.Required)
	}
	for _, p := range []string{"schema", "signature", "public_key_pem", "public_key_url"} {
		if in.Properties[p] == nil || in.Properties[p].Description == "" {
			t.Errorf("input property %q missing or undescribed", p)
		}
	}
	out, err := jsonschema.For[schemapin.Result](nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"key_fingerprint", "message", "revoked", "schema_hash", "verified"}
	if got := slices.Sorted(maps.Keys(out.Properties)); !slices.Equal(got, want) || len(out.Required) != len(want) {
		t.Fatalf("output properties %v, required %v", got, out.Required)
	}
	for _, p := range want {
		if out.Properties[p].Description == "" {
			t.Errorf("output property %q undescribed", p)
		}
	}
}
