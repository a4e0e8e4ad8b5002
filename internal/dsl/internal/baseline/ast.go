package baseline

import "github.com/alecthomas/participle/v2/lexer"

// The AST. Every node records the position of its first token (Pos) and of the token
// that follows it (EndPos). String, number, duration and vault tokens keep their exact
// source text; Unquote decodes strings.
//
// The items are parsed by the participle grammar in the struct tags. Block, Expr,
// Array, Record, Literal, Value, Type, MetaEntry and WithSetting implement
// participle.Parseable: they and the nodes below them are parsed by hand (syntax.go)
// following the productions given in their doc comments.

// File is a parsed source.
type File struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Items  []*Item `parser:"( (?! EOF) @@ )*"`

	src  []byte
	ends []int // end offsets of tokens, indexed like starts
	offs []int // start offsets of tokens
}

// Item is one top-level item; exactly one field is set.
type Item struct {
	Pos      lexer.Position
	EndPos   lexer.Position
	Metadata *Metadata `parser:"@@"`
	Agent    *Agent    `parser:"| @@"`
	Policy   *Policy   `parser:"| @@"`
	Type     *TypeDef  `parser:"| @@"`
	Function *Function `parser:"| @@"`
	Schedule *Schedule `parser:"| @@"`
	Channel  *Channel  `parser:"| @@"`
	Memory   *Memory   `parser:"| @@"`
	Webhook  *Webhook  `parser:"| @@"`
}

// Metadata is a metadata block.
type Metadata struct {
	Pos     lexer.Position
	EndPos  lexer.Position
	Entries []*MetaEntry `parser:"\"metadata\" \"{\" @@* \"}\""`
}

// MetaEntry is one key of a metadata block.
//
//	MetaEntry = Ident ( "=" | ":" ) Literal ","? .
type MetaEntry struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Key    string
	Value  *Literal
}

// Literal is a value, an array or a record.
//
//	Literal = Array | Record | Value .
type Literal struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Array  *Array
	Record *Record
	Value  *Value
}

// Agent is an agent definition.
type Agent struct {
	Pos       lexer.Position
	EndPos    lexer.Position
	Name      string       `parser:"\"agent\" @Ident"`
	HasParams bool         `parser:"( @\"(\""`
	Params    []*Param     `parser:"(@@ \",\"?)* \")\" )?"`
	Returns   *Type        `parser:"( \"->\" @@ )?"`
	Body      []*AgentItem `parser:"\"{\" ( (?! \"}\") @@ )* \"}\""`
}

// AgentItem is one item of an agent body; exactly one field is set.
type AgentItem struct {
	Pos          lexer.Position
	EndPos       lexer.Position
	Capabilities *Capabilities `parser:"@@"`
	Policy       *Policy       `parser:"| @@"`
	Function     *Function     `parser:"| @@"`
	With         *WithBlock    `parser:"| @@"`
}

// Capabilities is a capabilities declaration.
type Capabilities struct {
	Pos    lexer.Position
	EndPos lexer.Position
	List   *Array `parser:"\"capabilities\" (\"=\" | \":\") @@"`
}

// Policy is a policy block.
type Policy struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Name   string  `parser:"\"policy\" @Ident"`
	Rules  []*Rule `parser:"\"{\" @@* \"}\""`
}

// Rule is one rule of a policy.
type Rule struct {
	Pos       lexer.Position
	EndPos    lexer.Position
	Kind      string `parser:"@(\"allow\" | \"deny\" | \"require\" | \"audit\") \":\""`
	Selector  *Expr  `parser:"@@"`
	Condition *Expr  `parser:"( \"if\" @@ )?"`
}

// Function is a function definition.
type Function struct {
	Pos     lexer.Position
	EndPos  lexer.Position
	Name    string   `parser:"\"function\" @Ident \"(\""`
	Params  []*Param `parser:"(@@ \",\"?)* \")\""`
	Returns *Type    `parser:"( \"->\" @@ )?"`
	Body    *Block   `parser:"@@"`
}

// Param is a parameter.
type Param struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Name   string `parser:"@Ident \":\""`
	Type   *Type  `parser:"@@"`
}

// Type is a type reference, possibly generic.
//
//	Type = Ident ( "<" Type ( "," Type )* ">" )? .
type Type struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Name   string
	Args   []*Type
}

// TypeDef is a type definition: a record of fields or an alias.
type TypeDef struct {
	Pos      lexer.Position
	EndPos   lexer.Position
	Name     string   `parser:"\"type\" @Ident \"=\""`
	IsRecord bool     `parser:"( @\"{\""`
	Fields   []*Param `parser:"(@@ \",\"?)* \"}\""`
	Alias    string   `parser:"| @Ident )"`
}

// Schedule is a schedule block.
type Schedule struct {
	Pos     lexer.Position
	EndPos  lexer.Position
	Name    string  `parser:"\"schedule\" @Ident \"{\""`
	Entries []*Pair `parser:"@@* \"}\""`
}

// Setting is a key = value (or key: value) pair of a channel; the value is a value or
// an array.
type Setting struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Key    string `parser:"@Ident (\"=\" | \":\")"`
	Array  *Array `parser:"( @@"`
	Value  *Value `parser:"| @@ )"`
}

// Channel is a channel block.
type Channel struct {
	Pos     lexer.Position
	EndPos  lexer.Position
	Name    string         `parser:"\"channel\" @Ident \"{\""`
	Entries []*ChannelItem `parser:"@@* \"}\""`
}

// ChannelItem is one item of a channel block; exactly one field is set.
type ChannelItem struct {
	Pos                lexer.Position
	EndPos             lexer.Position
	Policy             *Policy           `parser:"(?= \"policy\" Ident) @@"`
	DataClassification []*Classification `parser:"| (?= \"data_classification\" \"{\") \"data_classification\" \"{\" (@@ \",\"?)* \"}\""`
	Setting            *Setting          `parser:"| @@ \",\"?"`
}

// Classification is one entry of a data_classification block.
type Classification struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Key    string `parser:"@Ident \":\""`
	Value  string `parser:"@Ident"`
}

// Memory is a memory block.
type Memory struct {
	Pos     lexer.Position
	EndPos  lexer.Position
	Name    string        `parser:"\"memory\" @Ident \"{\""`
	Entries []*MemoryItem `parser:"@@* \"}\""`
}

// Webhook is a webhook block.
type Webhook struct {
	Pos     lexer.Position
	EndPos  lexer.Position
	Name    string         `parser:"\"webhook\" @Ident \"{\""`
	Entries []*WebhookItem `parser:"@@* \"}\""`
}

// MemoryItem is an item of a memory block: a key followed by a value, or the search
// sub-block of such pairs. (The parser this was frozen from took either sub-block keyword
// in either kind of block; both now take only their own, as the grammar does.)
type MemoryItem struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Block  string      `parser:"( (?= \"search\" \"{\") @\"search\" \"{\""`
	Pairs  []*BarePair `parser:"@@* \"}\""`
	Pair   *BarePair   `parser:"| @@ )"`
}

// WebhookItem is an item of a webhook block: a key followed by a value, or the filter
// sub-block of such pairs.
type WebhookItem struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Block  string      `parser:"( (?= \"filter\" \"{\") @\"filter\" \"{\""`
	Pairs  []*BarePair `parser:"@@* \"}\""`
	Pair   *BarePair   `parser:"| @@ )"`
}

// Pair is a key = value (or key: value) pair of a schedule.
type Pair struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Key    string `parser:"@Ident (\"=\" | \":\")"`
	Value  *Value `parser:"@@ \",\"?"`
}

// BarePair is a key followed by a value without a separator.
type BarePair struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Key    string `parser:"@Ident"`
	Value  *Value `parser:"@@ \",\"?"`
}

// WithBlock is a with block: settings followed by a body.
type WithBlock struct {
	Pos      lexer.Position
	EndPos   lexer.Position
	Settings []*WithSetting `parser:"\"with\" (@@ \",\"?)*"`
	Body     *Block         `parser:"@@"`
}

// WithSetting is one setting of a with block.
//
//	WithSetting = Ident "=" ( Array | Value ) .
type WithSetting struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Key    string
	Array  *Array
	Value  *Value
}

// Value is a literal value, a vault URL or an identifier.
//
//	Value = String | Duration | Number | VaultURL | Ident .
type Value struct {
	Pos      lexer.Position
	EndPos   lexer.Position
	String   *string
	Duration *string
	Number   *string
	Vault    *string
	Ident    *string
}

// Block is a braced statement list; its last statement may be an expression without ";".
//
//	Block = "{" Stmt* "}" .
type Block struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Stmts  []*Stmt
}

// Stmt is a statement; exactly one field is set.
//
//	Stmt = "let" LetStmt | "if" IfStmt | "for" ForStmt | "match" Match | "try" TryStmt
//	     | "return" ReturnStmt | ExprStmt .
type Stmt struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Let    *LetStmt
	If     *IfStmt
	For    *ForStmt
	Match  *Match
	Try    *TryStmt
	Return *ReturnStmt
	Expr   *ExprStmt
}

// LetStmt is a let binding.
//
//	LetStmt = Ident "=" Expr ";" .
type LetStmt struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Name   string
	Value  *Expr
}

// IfStmt is an if statement with optional else-if branches and else block.
//
//	IfStmt = Cond Block ElseIf* ( "else" Block )? .
type IfStmt struct {
	Pos     lexer.Position
	EndPos  lexer.Position
	Cond    *Cond
	Then    *Block
	ElseIfs []*ElseIf
	Else    *Block
}

// ElseIf is an else-if branch of an if statement.
//
//	ElseIf = "else" "if" Cond Block .
type ElseIf struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Cond   *Cond
	Then   *Block
}

// Cond is the condition of an if statement: an expression or a let pattern.
//
//	Cond = "let" Pattern "=" Expr | Expr .
type Cond struct {
	Pos     lexer.Position
	EndPos  lexer.Position
	Pattern *Pattern
	Value   *Expr
	Expr    *Expr
}

// Pattern is a destructuring pattern of "if let".
//
//	Pattern = Ident ( "(" ( Pattern ","? )* ")" )? .
type Pattern struct {
	Pos     lexer.Position
	EndPos  lexer.Position
	Name    string
	HasArgs bool
	Args    []*Pattern
}

// ForStmt is a for loop.
//
//	ForStmt = Ident "in" Expr Block .
type ForStmt struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Var    string
	Iter   *Expr
	Body   *Block
}

// Match is a match statement.
//
//	Match = Expr "{" Arm* "}" .
type Match struct {
	Pos     lexer.Position
	EndPos  lexer.Position
	Subject *Expr
	Arms    []*Arm
}

// Arm is one arm of a match; a "{" that is not followed by a field opens a block.
//
//	Arm = Value "=>" ( Expr | Block ) ","? .
type Arm struct {
	Pos     lexer.Position
	EndPos  lexer.Position
	Pattern *Value
	Expr    *Expr
	Block   *Block
}

// TryStmt is a try block with catch clauses.
//
//	TryStmt = Block Catch* .
type TryStmt struct {
	Pos     lexer.Position
	EndPos  lexer.Position
	Body    *Block
	Catches []*Catch
}

// Catch is a catch clause: catch (name) or catch (Type name).
//
//	Catch = "catch" "(" Ident Ident? ")" Block .
type Catch struct {
	Pos    lexer.Position
	EndPos lexer.Position
	First  string
	Second string
	Body   *Block
}

// ReturnStmt is a return statement.
//
//	ReturnStmt = Expr? ";" .
type ReturnStmt struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Value  *Expr
}

// ExprStmt is an expression or an assignment, ended by ";" unless it is the last
// statement of its block (checked after parsing).
//
//	ExprStmt = Expr ( ( "=" | "+=" | "-=" | "*=" | "/=" | "%=" ) Expr )? ";"? .
type ExprStmt struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Target *Expr
	Op     string
	Value  *Expr
	Semi   bool
}

// Expr is a sequence of operands and binary operators; the grammar does not apply
// precedence (low to high: || && == != in < > <= >= + - * / %), which no view or
// admission rule needs. Ops[i] stands between operand i and operand i+1, where operand
// 0 is Left and operand i+1 is Operands[i].
//
//	Expr = Unary ( ( BinOp | "in" ) Unary )* .
type Expr struct {
	Pos      lexer.Position
	EndPos   lexer.Position
	Left     *Unary
	Ops      []string
	Operands []*Unary
}

// Unary is an operand with prefix operators and postfix suffixes.
//
//	Unary = ( "!" | "not" | "-" )* Primary Suffix* .
type Unary struct {
	Pos     lexer.Position
	EndPos  lexer.Position
	Ops     []string
	Primary *Primary
	Suffix  []*Suffix
}

// Suffix is a field access, a call or an index.
//
//	Suffix = "." Ident | "(" ( Arg ( "," Arg )* ","? )? ")" | "[" Expr "]" .
type Suffix struct {
	Pos   lexer.Position
	Field string
	Call  bool
	Args  []*Arg
	Index *Expr
}

// Arg is a call argument, possibly named (name = expr or name: expr).
//
//	Arg = ( Ident ( "=" | ":" ) )? Expr .
type Arg struct {
	Pos   lexer.Position
	Name  string
	Value *Expr
}

// Primary is an operand. A name followed by "{" and a field is a typed literal.
//
//	Primary = "if" IfExpr | Ident ( "=>" Expr | "{" ( Field ","? )+ "}" )? | String
//	        | Duration | Number | VaultURL | Array | Record | "(" Expr ")" .
type Primary struct {
	Pos      lexer.Position
	EndPos   lexer.Position
	If       *IfExpr
	Name     *string
	Lambda   *Expr
	Typed    []*Field
	String   *string
	Duration *string
	Number   *string
	Vault    *string
	Array    *Array
	Record   *Record
	Paren    *Expr
}

// IfExpr is an if expression; it always has an else block.
//
//	IfExpr = Expr Block ElseIfExpr* "else" Block .
type IfExpr struct {
	Pos     lexer.Position
	EndPos  lexer.Position
	Cond    *Expr
	Then    *Block
	ElseIfs []*ElseIfExpr
	Else    *Block
}

// ElseIfExpr is an else-if branch of an if expression.
//
//	ElseIfExpr = "else" "if" Expr Block .
type ElseIfExpr struct {
	Cond *Expr
	Then *Block
}

// Array is an array literal.
//
//	Array = "[" ( Expr ( "," Expr )* ","? )? "]" .
type Array struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Elems  []*Expr
}

// Record is a record literal.
//
//	Record = "{" ( Field ","? )* "}" .
type Record struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Fields []*Field
}

// Field is a key: value entry of a record or typed literal.
//
//	Field = ( Ident | String ) ":" Expr .
type Field struct {
	Pos    lexer.Position
	EndPos lexer.Position
	Key    string
	Value  *Expr
}
