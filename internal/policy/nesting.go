package policy

import "fmt"

// Bounds of how deep the expressions of a policy file nest. cedar-go's parser recurses
// (about nine calls) once per open bracket and its constant folding once per operator,
// with no bound of their own: 100,000 "!" or "(" (a 100 KB file) would overflow the stack
// and end the process, where an unusable file must only deny. MaxNesting counts, as the
// DSL does, open brackets plus the operators of the expression being read at each bracket
// level (a binary operator, a unary "!" or "-", a member access — "." or an index "[…]" —,
// if/then/else, in, has, like, is): a chain of 2,000 "||" is a policy someone may write; 100,000 is not.
//
// Two constructs cost cedar-go quadratic work in their length, whatever their depth, and
// have bounds of their own: the attribute path of a "has" (context has a.b.c, which it
// expands into a chain of "has" tests, the k-th repeating k attributes) at MaxHasPath
// attributes, and an entity type's path (A::B::C::"id", built by concatenating the names
// one by one) at MaxTypePath names.
const (
	MaxBrackets = 256
	MaxNesting  = 8192
	MaxHasPath  = 32
	MaxTypePath = 64
)

// checkNesting scans a policy file's text once, without parsing it, and refuses one whose
// expressions nest deeper than MaxNesting, or whose "has" or entity type paths are longer
// than MaxHasPath or MaxTypePath. String literals and comments ("//" to the end of the
// line, "/*" to the first "*/", as cedar-go's scanner reads them) are skipped; the count
// of a bracket level starts again at each "," (set and record elements, arguments:
// siblings) and every count at ";" (the end of a policy). It overcounts (a chain of "&&"
// that cedar-go folds as a tree is counted in full); it never undercounts.
func checkNesting(data []byte) (line, col int, err error) {
	line, col = 1, 1
	var chains []int // the operator count of each enclosing bracket level
	chain, total := 0, 0
	// The path being read: after "has", its attributes (hasPath > 0); after a name, its
	// "::" (typePath > 0). Any other token ends it; white space and comments do not.
	hasPath, typePath := 0, 0
	// The last token read is an operand (a name, a literal, a closing bracket): a "[" after
	// it is an index access (e["a"]), an operator of the chain it continues, which its "]"
	// does not take back — cedar-go nests each access one level deeper, as it does each ".".
	operand := false
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
		inHas, inType := false, false // the token read continues the path
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			advance(1)
			continue
		case c == '/' && i+1 < len(data) && data[i+1] == '/':
			for i < len(data) && data[i] != '\n' {
				advance(1)
			}
			continue
		case c == '/' && i+1 < len(data) && data[i+1] == '*':
			advance(2)
			for i < len(data) && !(data[i] == '*' && i+1 < len(data) && data[i+1] == '/') {
				advance(1)
			}
			advance(2) // an unterminated comment runs to the end: cedar-go reports it
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
			operand = true
			continue
		case c >= '0' && c <= '9':
			// A number, as cedar-go scans it: its digits, and no more ("1has" is 1 has).
			j := i
			for j < len(data) && data[j] >= '0' && data[j] <= '9' {
				j++
			}
			advance(j - i)
			operand = true
		case isIdentByte(c):
			j := i
			for j < len(data) && isIdentByte(data[j]) {
				j++
			}
			switch string(data[i:j]) {
			case "has":
				err = deepen(1)
				hasPath, inHas = 1, true
				operand = false
			case "if", "then", "else", "in", "like", "is":
				err = deepen(1)
				operand = false
			default:
				inHas, inType = hasPath > 0, true
				if typePath == 0 {
					typePath = 1
				}
				operand = true
			}
			advance(j - i)
		case c == '(' || c == '[' || c == '{':
			if c == '[' && operand {
				err = deepen(1) // an index access: an operator of the enclosing chain
			}
			chains = append(chains, chain)
			chain = 0
			if berr := bracket(); err == nil {
				err = berr
			}
			chain = 0 // the bracket counts in total; its level's chain starts empty
			operand = false
			advance(1)
		case c == ')' || c == ']' || c == '}':
			total -= chain + 1
			if n := len(chains); n > 0 {
				chain = chains[n-1]
				chains = chains[:n-1]
			} else {
				chain, total = 0, 0 // unbalanced: cedar-go reports it
			}
			operand = true
			advance(1)
		case c == ',':
			total -= chain
			chain = 0
			operand = false
			advance(1)
		case c == ';':
			chains, chain, total = chains[:0], 0, 0
			operand = false
			advance(1)
		case c == ':' && i+1 < len(data) && data[i+1] == ':':
			// An entity type's path, not an operator.
			if typePath++; typePath > MaxTypePath {
				err = fmt.Errorf("an entity type path of more than %d names, which symbi refuses before parsing", MaxTypePath)
			}
			inType = true
			operand = false
			advance(2)
		case c == '&' || c == '|' || c == '=' || c == '!' || c == '<' || c == '>' || c == '+' || c == '-' || c == '*' || c == '.':
			if i+1 < len(data) && (data[i+1] == '&' || data[i+1] == '|' || data[i+1] == '=') && c != '.' {
				advance(1) // a two-character operator counts once
			}
			err = deepen(1)
			if c == '.' && hasPath > 0 {
				if hasPath++; hasPath > MaxHasPath {
					err = fmt.Errorf("a \"has\" path of more than %d attributes, which symbi refuses before parsing", MaxHasPath)
				}
				inHas = true
			}
			operand = false
			advance(1)
		default:
			operand = false
			advance(1)
		}
		if !inHas {
			hasPath = 0
		}
		if !inType {
			typePath = 0
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

// firstBadEscape returns the line and column (1-based, in characters) of the first escape
// sequence of a string literal that Cedar refuses, or 0, 0 when there is none. It reads
// escapes as cedar-go does (internal/rust.Unquote): \n \r \t \\ \0 \' \"; \x and two hex
// digits up to 7F; \u{…} of one to six hex digits (an "_" may follow a digit) naming a
// Unicode scalar value; \* only in the pattern of a like. Comments are skipped as
// checkNesting skips them.
func firstBadEscape(data []byte) (line, col int) {
	at := func(i int) (int, int) { // the position of data[i], counted from the start
		l, c := 1, 1
		for k := 0; k < i; k++ {
			if data[k] == '\n' {
				l, c = l+1, 1
			} else if data[k]&0xC0 != 0x80 {
				c++
			}
		}
		return l, c
	}
	prevWord := "" // the identifier just before, if the last token was one
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			continue
		case c == '/' && i+1 < len(data) && data[i+1] == '/':
			for i < len(data) && data[i] != '\n' {
				i++
			}
			continue
		case c == '/' && i+1 < len(data) && data[i+1] == '*':
			i += 2
			for i < len(data) && !(data[i] == '*' && i+1 < len(data) && data[i+1] == '/') {
				i++
			}
			i++
			continue
		case isIdentByte(c):
			j := i
			for j < len(data) && isIdentByte(data[j]) {
				j++
			}
			prevWord = string(data[i:j])
			i = j - 1
			continue
		case c == '"':
			star := prevWord == "like"
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] != '\\' {
					continue
				}
				start := i
				if i++; i == len(data) {
					return at(start)
				}
				ok := true
				switch data[i] {
				case 'n', 'r', 't', '\\', '0', '\'', '"':
				case '*':
					ok = star
				case 'x':
					ok = i+2 < len(data) && isHex(data[i+1]) && isHex(data[i+2]) && data[i+1] <= '7'
					i += 2
				case 'u':
					var end int
					end, ok = unicodeEscape(data, i+1)
					i = end
				default:
					ok = false
				}
				if !ok {
					return at(start)
				}
			}
		}
		prevWord = ""
	}
	return 0, 0
}

// unicodeEscape reads the {…} of a \u escape at data[i], as cedar-go does, and returns
// the index of its "}" and whether it is good.
func unicodeEscape(data []byte, i int) (end int, ok bool) {
	if i >= len(data) || data[i] != '{' {
		return i, false
	}
	digits, v := 0, 0
	for i++; i < len(data) && data[i] != '}'; i++ {
		switch c := data[i]; {
		case c == '_' && digits > 0:
		case isHex(c):
			if digits++; digits <= 6 {
				v = v*16 + hexVal(c)
			}
		default:
			return i, false
		}
	}
	if i >= len(data) || digits == 0 || digits > 6 || v > 0x10FFFF || v >= 0xD800 && v <= 0xDFFF {
		return i, false
	}
	return i, true
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func hexVal(c byte) int {
	switch {
	case c <= '9':
		return int(c - '0')
	case c >= 'a':
		return int(c-'a') + 10
	}
	return int(c-'A') + 10
}
