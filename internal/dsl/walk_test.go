package dsl

import (
	"reflect"
	"testing"
)

// TestVisitBlocksEverywhere: visitBlocks finds every block of a file — the same blocks a
// walk of every field of the syntax tree finds — in a file with an if expression wherever
// the grammar takes an expression. A construct added to the syntax tree without its place
// in visitBlocks fails here.
func TestVisitBlocksEverywhere(t *testing.T) {
	const e = `if c { 1 } else { 2 }`
	src := `metadata { tags = [` + e + `], info = { k: ` + e + ` } }
policy top { allow: ` + e + ` if ` + e + ` }
function g() { let v = ` + e + `; v }
agent a {
  capabilities = [` + e + `]
  policy p { allow: ` + e + ` deny: "x" if ` + e + ` }
  function f() { if c { ` + e + ` } else { 3 } }
  with sandbox = [` + e + `] { ` + e + ` }
}
channel ch { channels = [` + e + `], policy q { allow: ` + e + ` } }
`
	f, err := Parse("x", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var found int
	visitBlocks(f, func(*Block) { found++ })
	all := 0
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() {
				return
			}
			if _, ok := v.Interface().(*Block); ok {
				all++
			}
			walk(v.Elem())
		case reflect.Struct:
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					walk(v.Field(i))
				}
			}
		case reflect.Slice:
			for i := range v.Len() {
				walk(v.Index(i))
			}
		}
	}
	walk(reflect.ValueOf(f))
	if found != all || all < 30 {
		t.Fatalf("visitBlocks found %d blocks, the syntax tree holds %d", found, all)
	}
}
