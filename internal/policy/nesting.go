package policy

import "fmt"

// Bounds of how deep the expressions of a policy file nest. cedar-go's parser recurses
// (about nine calls) once per open bracket and its constant folding once per operator,
// with no bound of their own: 100,000 "!" or "(" (a 100 KB file) would overflow the stack
// and end the process, where an unusable file must only deny. MaxNesting counts, as the
// DSL does, open brackets plus the operators of the expression being read at each bracket
// level (a binary operator, a unary "!" or "-", a member access, if/then/else, in, has,
// like, is): a chain of 2,000 "||" is a policy someone may write; 100,000 is not.
const (
	MaxBrackets = 256
	MaxNesting  = 8192
)

// checkNesting scans a policy file's text once, without parsing it, and refuses one whose
// expressions nest deeper than MaxNesting. String literals and comments are skipped; the
// count of a bracket level starts again at each "," (set and record elements, arguments:
// siblings) and every count at ";" (the end of a policy). It overcounts (a chain of "&&"
// that cedar-go folds as a tree is counted in full); it never undercounts.
func checkNesting(data []byte) (line, col int, err error) {
	line, col = 1, 1
	var chains []int // the operator count of each enclosing bracket level
	chain, total := 0, 0
	deepen := func(n int) error {
		chain += n
		total += n
		if total > MaxNesting {
			return fmt.Errorf("expressions nested deeper than %d levels (brackets and operators), which symbi refuses before parsing", MaxNesting)
		}
		return nil
	}
	bracket := func() error {
		if len(chains) > MaxBrackets {
			return fmt.Errorf("brackets nested deeper than %d levels, which symbi refuses before parsing", MaxBrackets)
		}
		return deepen(1)
	}
	for i := 0; i < len(data); {
		c := data[i]
		advance := func(n int) {
			for k := 0; k < n && i < len(data); k++ {
				if data[i] == '\n' {
					line, col = line+1, 1
				} else if data[i]&0xC0 != 0x80 {
					col++
				}
				i++
			}
		}
		atLine, atCol := line, col
		var err error
		switch {
		case c == '/' && i+1 < len(data) && data[i+1] == '/':
			for i < len(data) && data[i] != '\n' {
				advance(1)
			}
			continue
		case c == '"':
			advance(1)
			for i < len(data) && data[i] != '"' {
				if data[i] == '\\' {
					advance(1)
				}
				advance(1)
			}
			advance(1)
			continue
		case isIdentByte(c):
			j := i
			for j < len(data) && isIdentByte(data[j]) {
				j++
			}
			switch string(data[i:j]) {
			case "if", "then", "else", "in", "has", "like", "is":
				err = deepen(1)
			}
			advance(j - i)
		case c == '(' || c == '[' || c == '{':
			chains = append(chains, chain)
			chain = 0
			err = bracket()
			chain = 0 // the bracket counts in total; its level's chain starts empty
			advance(1)
		case c == ')' || c == ']' || c == '}':
			total -= chain + 1
			if n := len(chains); n > 0 {
				chain = chains[n-1]
				chains = chains[:n-1]
			} else {
				chain, total = 0, 0 // unbalanced: cedar-go reports it
			}
			advance(1)
		case c == ',':
			total -= chain
			chain = 0
			advance(1)
		case c == ';':
			chains, chain, total = chains[:0], 0, 0
			advance(1)
		case c == ':' && i+1 < len(data) && data[i+1] == ':':
			advance(2) // an entity type's path, not an operator
		case c == '&' || c == '|' || c == '=' || c == '!' || c == '<' || c == '>' || c == '+' || c == '-' || c == '*' || c == '.':
			if i+1 < len(data) && (data[i+1] == '&' || data[i+1] == '|' || data[i+1] == '=') && c != '.' {
				advance(1) // a two-character operator counts once
			}
			err = deepen(1)
			advance(1)
		default:
			advance(1)
		}
		if err != nil {
			return atLine, atCol, err
		}
	}
	return 0, 0, nil
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
