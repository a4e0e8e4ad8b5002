// Package baseline is a frozen copy of the parser of package dsl as it was at commit
// 50cb750 (the last commit to change internal/dsl before the parser's item grammar was
// parsed by hand; repository HEAD 4cd21ae when copied). It serves only as the "before"
// of BenchmarkParse, which runs both parsers side by side in one run, and as the
// reference of the differential tests and fuzz target, which require the current parser
// to build the same tree and report the same errors. Do not edit it.
//
// The files are the originals with only the package clause changed; to check:
//
//	for f in ast lexer parse syntax walk; do
//	  git show 50cb750:internal/dsl/$f.go | sed '1s/^package dsl$/package baseline/' |
//	    diff - internal/dsl/internal/baseline/$f.go
//	done
package baseline
