package dsl_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/alecthomas/participle/v2/lexer"

	"symbi/internal/dsl"
	"symbi/internal/errcode"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/dsl")

const corpus = "../../testdata/dsl"

func corpusFiles(t testing.TB, dir string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(corpus, dir, "*.symbi"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no corpus files in %s: %v", dir, err)
	}
	return paths
}

func TestValidCorpus(t *testing.T) {
	paths := corpusFiles(t, "valid")
	if len(paths) < 30 {
		t.Fatalf("valid corpus has %d files, want at least 30", len(paths))
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			src, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			f, err := dsl.Parse(p, src)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if r := dsl.Analyze(p, src); !r.Valid || len(r.Errors) != 0 {
				t.Fatalf("Analyze: valid=%v errors=%v", r.Valid, r.Errors)
			}
			if !bytes.Equal(f.Source(), src) {
				t.Fatal("Source() differs from the input")
			}
		})
	}
}

// TestCorpusCoversGrammar checks that every field of every AST node is set by at least
// one file of the valid corpus, i.e. that the corpus uses every production.
func TestCorpusCoversGrammar(t *testing.T) {
	seen := map[string]bool{}
	all := map[string]bool{}
	posType := reflect.TypeOf(lexer.Position{})
	var visit func(v reflect.Value)
	visit = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if !v.IsNil() {
				visit(v.Elem())
			}
		case reflect.Slice:
			for i := 0; i < v.Len(); i++ {
				visit(v.Index(i))
			}
		case reflect.Struct:
			typ := v.Type()
			for i := 0; i < typ.NumField(); i++ {
				fl := typ.Field(i)
				if !fl.IsExported() || fl.Type == posType {
					continue
				}
				key := typ.Name() + "." + fl.Name
				all[key] = true
				if !v.Field(i).IsZero() {
					seen[key] = true
				}
				visit(v.Field(i))
			}
		}
	}
	for _, p := range corpusFiles(t, "valid") {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := dsl.Parse(p, src)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		visit(reflect.ValueOf(f))
	}
	for key := range all {
		if !seen[key] {
			t.Errorf("no valid corpus file sets %s", key)
		}
	}
	if len(all) < 100 {
		t.Errorf("only %d AST fields visited; the walk is broken", len(all))
	}
}

// TestInvalidCorpus checks the first error of each invalid file against the golden
// .err file beside it ("line:column: message").
func TestInvalidCorpus(t *testing.T) {
	paths := corpusFiles(t, "invalid")
	if len(paths) < 15 {
		t.Fatalf("invalid corpus has %d files, want at least 15", len(paths))
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			src, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			_, err = dsl.Parse(p, src)
			errs := dsl.Errors(err)
			if err == nil || len(errs) == 0 {
				t.Fatalf("Parse accepted an invalid file (err %v)", err)
			}
			if errcode.Of(err) != errcode.InvalidRequest {
				t.Errorf("code %q, want invalid_request", errcode.Of(err))
			}
			first := errs[0]
			if first.Line < 1 || first.Column < 1 || first.Offset > len(src) {
				t.Errorf("position %d:%d (offset %d) outside the input", first.Line, first.Column, first.Offset)
			}
			got := first.Error() + "\n"
			golden := strings.TrimSuffix(p, ".symbi") + ".err"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Errorf("first error %q, want %q", got, want)
			}
		})
	}
}

// TestAnalyzeGolden compares the JSON views of some files with golden files.
func TestAnalyzeGolden(t *testing.T) {
	for _, name := range []string{
		"valid/02_minimal_declared.symbi", "valid/03_minimal_reader.symbi", "valid/05_support_desk.symbi",
		"valid/08_metadata_forms.symbi", "valid/11_generic_types.symbi", "valid/26_policy_rules.symbi",
		"valid/28_channels.symbi", "valid/29_memories.symbi", "valid/30_webhooks.symbi",
		"valid/31_multiple_agents.symbi", "invalid/09_rule_without_colon.symbi",
	} {
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join(corpus, name))
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(dsl.Analyze(name, src), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join(corpus, "golden", strings.NewReplacer("/", "_", ".symbi", ".json").Replace(name))
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Analyze(%s) differs from %s:\n%s", name, golden, got)
			}
		})
	}
}

func TestAnalyzeNeverNull(t *testing.T) {
	for _, src := range []string{"", "agent a {}", "agent {", "schedule s {}"} {
		b, err := json.Marshal(dsl.Analyze("inline", []byte(src)))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("null")) {
			t.Errorf("Analyze(%q) has a null: %s", src, b)
		}
	}
}

func TestLimits(t *testing.T) {
	tests := []struct {
		name     string
		src      []byte
		sentinel error
		code     errcode.Code
		pos      string
	}{
		{"too large", append(bytes.Repeat([]byte("#"), dsl.MaxSourceBytes), 'x'), dsl.ErrTooLarge, errcode.LimitExceeded, "1:1048577"},
		{"largest accepted", nil, nil, "", ""},
		{"not UTF-8", []byte("agent a {\n\"\xff\"}"), dsl.ErrEncoding, errcode.InvalidRequest, "2:2"},
		{"100000 parentheses", []byte("function f() { let x = " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000) + "; }"), dsl.ErrNesting, errcode.InvalidRequest, "1:279"},
		{"100000 brackets", []byte("metadata { a = " + strings.Repeat("[", 100000)), dsl.ErrNesting, errcode.InvalidRequest, "1:271"},
		{"100000 unclosed braces", []byte(strings.Repeat("{", 100000)), dsl.ErrNesting, errcode.InvalidRequest, "1:257"},
		{"lambda chain", []byte("function f() { let x = " + strings.Repeat("x => ", 100000) + "1; }"), dsl.ErrNesting, errcode.InvalidRequest, "1:5141"},
		{"generic chain", []byte("type T = " + strings.Repeat("A<", 100000)), dsl.ErrNesting, errcode.InvalidRequest, "1:2059"},
		{"if chain", []byte("agent a { policy p { allow: " + strings.Repeat("if ", 300000) + "}}"), dsl.ErrNesting, errcode.InvalidRequest, "1:3095"},
		{"prefix operators", []byte("function f() { let x = " + strings.Repeat("!-", 50000) + "1; }"), nil, "", ""},
	}
	tests[1].src = append([]byte("agent a {}\n"), bytes.Repeat([]byte("#"), dsl.MaxSourceBytes-11)...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := dsl.Parse("limits", tt.src)
			if tt.sentinel == nil {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.sentinel) {
				t.Fatalf("err %v, want %v", err, tt.sentinel)
			}
			if errcode.Of(err) != tt.code {
				t.Errorf("code %q, want %q", errcode.Of(err), tt.code)
			}
			if got := dsl.Errors(err)[0].Error(); !strings.HasPrefix(got, tt.pos+": ") {
				t.Errorf("error %q, want position %s", got, tt.pos)
			}
		})
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want string // time.Duration.String, or "error"
	}{
		{"30.seconds", "30s"}, {"5.minutes", "5m0s"}, {"2.hours", "2h0m0s"}, {"30s", "30s"}, {"5m", "5m0s"},
		{"1h", "1h0m0s"}, {"2d", "48h0m0s"}, {"1w", "168h0m0s"}, {"2months", "1440h0m0s"}, {"1y", "8760h0m0s"},
		{"45", "45s"}, {"0", "0s"}, {"", "error"}, {"s", "error"}, {"1.5h", "error"}, {"-1s", "error"},
		{"1_000s", "error"}, {"10x", "error"}, {"99999999999999999999s", "error"}, {"9999999999999y", "error"},
	}
	for _, tt := range tests {
		d, err := dsl.ParseDuration(tt.in)
		got := d.String()
		if err != nil {
			got = "error"
		}
		if got != tt.want {
			t.Errorf("ParseDuration(%q) = %s (err %v), want %s", tt.in, got, err, tt.want)
		}
	}
}

func TestUnquote(t *testing.T) {
	tests := []struct{ in, want string }{
		{`"plain"`, "plain"},
		{`"a\"b\\c\/d\'e"`, `a"b\c/d'e`},
		{`"\n\r\t\0"`, "\n\r\t\x00"},
		{`"\u00e9\u{1F600}"`, "é😀"},
		{"\"two\nlines\"", "two\nlines"},
	}
	for _, tt := range tests {
		got, err := dsl.Unquote(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("Unquote(%s) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{`"\q"`, `"\u12"`, `"\u{D800}"`, `"\u{110000}"`, `x`, `"`} {
		if _, err := dsl.Unquote(bad); err == nil {
			t.Errorf("Unquote(%s) accepted", bad)
		}
	}
}

func TestAgentNames(t *testing.T) {
	f, err := dsl.Parse("n", []byte("agent b {} policy p {} agent a {} agent b {}"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.AgentNames(), ","); got != "b,a,b" {
		t.Errorf("AgentNames = %s", got)
	}
}

// TestParseConcurrent parses the corpus from several goroutines at once (run with -race).
func TestParseConcurrent(t *testing.T) {
	paths := corpusFiles(t, "valid")
	done := make(chan error, 4)
	for range 4 {
		go func() {
			for _, p := range paths {
				src, err := os.ReadFile(p)
				if err == nil {
					_, err = dsl.Parse(p, src)
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
