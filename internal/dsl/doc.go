// Package dsl parses the Symbiont agent definition language (.symbi, legacy .dsl) and
// decides whether a definition may be invoked.
//
// # Parsing
//
// Parse accepts the whole language (see docs/dsl.md for the grammar): metadata, agents
// with parameters, return types, capabilities, policies, functions and with blocks;
// top-level policies, types, functions, schedules, channels, memories and webhooks;
// statements (let, if / else if / else, if let, for, match, try/catch, return,
// assignments with = += -= *= /= %=) and expressions (binary operators, ! not -,
// field access, calls with named arguments, indexing, lambdas x => e, if expressions,
// typed literals Name { field: e }, arrays, records, vault:// URLs, durations).
//
// Ambiguities are resolved as follows. A "{" in expression position opens a record; a
// "{" after if/for/match heads, else, try, catch, function heads, with settings and
// "=>" of a match arm opens a block, unless it is followed by a field ("name:" or
// "\"name\":"), which makes it a record. An identifier followed by "{" is a typed literal only when the brace
// is followed by a field ("name:" or "\"name\":"), so "if ready { … }" is a condition
// and a block. "if" at the start of a statement is a statement (else optional); elsewhere
// it is an expression and needs an else. Keywords are reserved only where the grammar
// uses them. An expression statement ends with ";" unless it is the last statement of
// its block. A memory or webhook value may also be a vault URL.
//
// The grammar is LL(1): every choice is made on the next token or on an explicit
// lookahead guard, and the parser never backtracks over consumed tokens, so each error
// is reported where the input stops matching. participle drives the parse: the lexer is
// a participle lexer definition feeding its token stream, and the file is the
// participle production in File's struct tag, a sequence of items up to the end of the
// input. Items and everything in them are parsed by hand, Item being a
// participle.Parseable node, following the productions given in the AST's doc comments.
//
// Limits: a source over MaxSourceBytes, a source that is not UTF-8, brackets nested
// deeper than MaxBracketDepth, or right-nested "=>"/"<" chains deeper than MaxChainDepth
// are errors; every error is an *Error with a 1-based line and a character column.
//
// # Admission
//
// Admit applies the canonical conversational definition rules: selection, then rules
// 2–6 (rule 1 is "no syntax errors", applied by AdmitSource). Every refusal names its
// rule and the line:column of the offending construct. The refusal messages are listed
// in docs/dsl.md.
//
// # Views
//
// Analyze returns the JSON views used by "symbi dsl parse" and the parse_dsl tool.
package dsl
