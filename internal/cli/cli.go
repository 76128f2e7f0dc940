// Package cli is the argument handling every command of the binaries
// shares, so that each one answers -h and --help the same way and none of
// them mistakes a request for help, or a stray argument, for a request to go
// ahead: with production's environment loaded, `run --help` going ahead
// drains production's queue.
package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// NewFlagSet is a flag set named after the command ("scorerefresh status")
// whose usage is help (introducing the flags, if any), then their defaults;
// on stderr, or stdout when asked for (Parse switches it).
func NewFlagSet(name, help string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), help)
		fs.PrintDefaults()
	}
	return fs
}

// WantsHelp reports whether args ask for help anywhere before a "--", not
// only in flags: --help appended to a command line that would otherwise run
// must get the help, and a flag parser stops at the first operand.
func WantsHelp(args []string) bool {
	i := slices.IndexFunc(args, func(a string) bool { return a == "--" || a == "-h" || a == "-help" || a == "--help" })
	return i >= 0 && args[i] != "--"
}

// Parse parses args into fs and says whether the command goes on; if not,
// code is 0 after the usage on stdout for -h or --help, or 2 (a command line
// refused) after what is wrong and the usage on stderr. operands says whether
// the command takes operands; one that looks like a flag is refused even then
// (the parser would not read it as one), unless it follows "--".
func Parse(fs *flag.FlagSet, args []string, operands bool, stdout io.Writer) (code int, ok bool) {
	// The parser prints the usage itself, before returning: hold it until
	// it is known whether it was asked for ("-help=true") or a mistake.
	stderr, held, help := fs.Output(), new(bytes.Buffer), WantsHelp(args)
	var err error
	if !help {
		fs.SetOutput(held)
		err = fs.Parse(args)
		fs.SetOutput(stderr)
	}
	if help || errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return 0, false
	}
	_, _ = held.WriteTo(stderr)
	if err != nil {
		return 2, false // the parser said what and printed the usage
	}
	rest := fs.Args()
	if len(rest) > 0 && !operands {
		return Refuse(fs, "unexpected argument %q", rest[0]), false
	}
	afterDashes := len(args) > len(rest) && args[len(args)-len(rest)-1] == "--"
	if i := slices.IndexFunc(rest, func(a string) bool { return len(a) > 1 && strings.HasPrefix(a, "-") }); i >= 0 && !afterDashes {
		return Refuse(fs, "%q after the operands: flags go first (put -- before an operand that starts with -)", rest[i]), false
	}
	return 0, true
}

// Refuse names what is wrong, prints the usage on stderr and returns 2.
func Refuse(fs *flag.FlagSet, format string, args ...any) int {
	fmt.Fprintf(fs.Output(), "%s: %s\n\n", fs.Name(), fmt.Sprintf(format, args...))
	fs.Usage()
	return 2
}
