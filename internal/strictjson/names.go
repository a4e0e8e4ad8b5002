package strictjson

import (
	"reflect"
	"strings"
	"sync"
)

// names caches NamesOf per type: a reader checks every document it decodes.
var names sync.Map // reflect.Type → []string

// NamesOf returns the member names encoding/json reads into a value of type t — the json
// tags of its struct fields, through pointers, slices, arrays, map values and nested
// structs — for Options.ExactNames: encoding/json matches a member name in any case, so a
// name in other capitals would be read as the format's, and a second spelling would
// override the first.
func NamesOf(t reflect.Type) []string {
	if n, ok := names.Load(t); ok {
		return n.([]string)
	}
	n := walkNames(t)
	names.Store(t, n)
	return n
}

func walkNames(t reflect.Type) []string {
	var out []string
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for i := range t.NumField() {
			f := t.Field(i)
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
				out = append(out, name)
			}
			walk(f.Type)
		}
	}
	walk(t)
	return out
}
