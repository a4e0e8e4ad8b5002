package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// newFlags returns a FlagSet for a subcommand whose usage text names the command,
// its arguments and its flags: printed to stdout when asked for (--help, exit 0), as
// symbi --help prints the command list, and to stderr after a usage error. symbi mcp's
// stdout carries only MCP messages (an MCP client reads it), so its help is on stderr.
func newFlags(e *env, c *command) *flag.FlagSet {
	fs := flag.NewFlagSet("symbi "+c.name, flag.ContinueOnError)
	help := e.stdout
	if c.name == "mcp" {
		help = e.stderr
	}
	fs.SetOutput(&parseOutput{stdout: help, stderr: e.stderr})
	fs.Usage = func() {
		has := false
		fs.VisitAll(func(*flag.Flag) { has = true })
		line := "symbi " + c.name
		if has {
			line += " [flags]"
		}
		fmt.Fprintf(fs.Output(), "usage: %s\n\n%s\n", strings.TrimSpace(line+" "+c.args), c.summary)
		if has {
			fmt.Fprintln(fs.Output())
			printFlags(fs)
		}
	}
	return fs
}

// printFlags lists fs's flags in the double-dash form the README uses (--project DIR),
// with their defaults.
func printFlags(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if o, ok := f.Value.(*onceValue); ok {
			inner := *f
			inner.Value = o.Value // its type names its argument ("string", "int")
			f = &inner
		}
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(fs.Output(), "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			fmt.Fprintf(fs.Output(), " (default %q)", f.DefValue)
		}
		fmt.Fprintln(fs.Output())
	})
}

// parseFlags parses args; it returns (exit code, false) when the command must stop:
// 0 after --help, 2 after a usage error.
func parseFlags(fs *flag.FlagSet, args []string) (int, bool) {
	// A flag given twice is a usage error, but for a repeatable one: the flag package
	// would keep the last value, and a command that signs evidence (runs resolve
	// --resolution accepted --resolution rejected) would sign one the person may not mean.
	fs.VisitAll(func(f *flag.Flag) {
		_, repeatable := f.Value.(*listFlag)
		_, wrapped := f.Value.(*onceValue) // parsed before (parseInterspersed)
		if !repeatable && !wrapped {
			f.Value = &onceValue{Value: f.Value}
		}
	})
	out, _ := fs.Output().(*parseOutput)
	if out != nil {
		out.hold()
	}
	err := fs.Parse(args)
	if out != nil {
		out.release(errors.Is(err, flag.ErrHelp))
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	// An empty --project ("$DIR" with DIR unset) would be the working directory's
	// project, not the one meant.
	if f := fs.Lookup("project"); f != nil && f.Value.String() == "" && given(fs, "project") {
		fmt.Fprintf(fs.Output(), "%s: --project is empty: give the project directory (\".\" for the working directory)\n", fs.Name())
		return 2, false
	}
	return 0, true
}

// parseOutput is a FlagSet's output. What the flag package prints while parsing is
// held until the parse is done: the usage text asked for with --help then goes to
// stdout, an error and the usage after it to stderr. Everything else goes to stderr.
type parseOutput struct {
	stdout, stderr io.Writer     // stdout: where the help asked for goes
	held           *bytes.Buffer // non-nil while parsing
}

func (o *parseOutput) Write(p []byte) (int, error) {
	if o.held != nil {
		return o.held.Write(p)
	}
	return o.stderr.Write(p)
}

func (o *parseOutput) hold() { o.held = new(bytes.Buffer) }

// release writes what was held, to stdout if it was the help asked for.
func (o *parseOutput) release(help bool) {
	w := o.stderr
	if help {
		w = o.stdout
	}
	held := o.held
	o.held = nil
	w.Write(held.Bytes()) // a failed write is the command's output failure (runCommand)
}

// given reports whether the flag name was set on the command line.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// onceValue is a flag value that may be set once.
type onceValue struct {
	flag.Value
	set bool
}

func (o *onceValue) Set(s string) error {
	if o.set {
		return errors.New("given twice (it is not repeatable)")
	}
	o.set = true
	if g, ok := o.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case int, int64, uint, uint64:
			// The flag package reads integers as Go literals (0x1f, 0o17, 1_000, and 017
			// as octal): a receipt's count or a cursor copied with a leading zero would
			// silently mean another number. A number here is written in decimal.
			if !isDecimal(s) {
				return fmt.Errorf("%q: want a decimal number", s)
			}
			s = trimLeadingZeros(s)
		case float64:
			// Likewise 0x1p4, 1_0.5, Inf and NaN: digits, a point, a decimal exponent.
			if !isDecimalFloat(s) {
				return fmt.Errorf("%q: want a decimal number", s)
			}
		}
	}
	return o.Value.Set(s)
}

// isDecimal reports whether s is a whole number in decimal digits, with an optional sign.
func isDecimal(s string) bool {
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// trimLeadingZeros drops the leading zeros of a decimal number (isDecimal), which the
// flag package would take to mean octal: 010 is ten, 00 zero.
func trimLeadingZeros(s string) string {
	sign := ""
	if s[0] == '+' || s[0] == '-' {
		sign, s = s[:1], s[1:]
	}
	if s = strings.TrimLeft(s, "0"); s == "" {
		s = "0"
	}
	return sign + s
}

// isDecimalFloat reports whether s is a decimal number with an optional sign, fraction
// and exponent (1, 2.5, .5, 1e3, 2.5E-2).
func isDecimalFloat(s string) bool {
	mant, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	if len(mant) > 0 && (mant[0] == '+' || mant[0] == '-') {
		mant = mant[1:]
	}
	whole, frac, _ := strings.Cut(mant, ".")
	digits := func(d string) bool { return strings.Trim(d, "0123456789") == "" }
	if whole+frac == "" || !digits(whole) || !digits(frac) {
		return false
	}
	return !hasExp || isDecimal(exp)
}

// IsBoolFlag keeps a boolean flag's form: --json, without a value.
func (o *onceValue) IsBoolFlag() bool {
	b, ok := o.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// parseNoArgs is parseFlags for a command that takes no argument besides its flags: a
// stray one (a project directory given without --project, say) is a usage error, exit 2,
// never ignored — the command would act on another project than the one meant.
func parseNoArgs(fs *flag.FlagSet, args []string) (int, bool) {
	if code, ok := parseFlags(fs, args); !ok {
		return code, false
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q (this command takes flags only; flags go before arguments)\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return 2, false
	}
	return 0, true
}

// byteSize is a flag value of bytes: a whole number with an optional IEC unit, as in
// 64MiB, 1GiB, 512KiB or 1048576 (0 is allowed).
type byteSize uint64

var byteUnits = []struct {
	suffix string
	mult   uint64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

func (b *byteSize) String() string {
	for _, u := range byteUnits {
		if v := uint64(*b); v != 0 && v%u.mult == 0 {
			return strconv.FormatUint(v/u.mult, 10) + u.suffix
		}
	}
	return "0"
}

func (b *byteSize) Set(s string) error {
	num, mult := s, uint64(1)
	for _, u := range byteUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil || v > math.MaxUint64/mult {
		return fmt.Errorf("%q: want a whole number of bytes with an optional unit KiB, MiB, GiB or TiB (e.g. 64MiB)", s)
	}
	*b = byteSize(v * mult)
	return nil
}

// listFlag is a repeatable flag of non-empty values (--checkpoint FILE, --path P).
type listFlag []string

func (c *listFlag) String() string { return strings.Join(*c, ",") }

func (c *listFlag) Set(v string) error {
	if v == "" {
		return errors.New("want a value")
	}
	*c = append(*c, v)
	return nil
}
