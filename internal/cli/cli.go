// Package cli is the argument handling every command of the binaries
// shares, so that each one answers -h and --help the same way and none of
// them ever mistakes a request for help, or a stray argument, for a request
// to go ahead: `scorerefresh run --help` used to start the service, and with
// production's environment loaded that drains production's queue.
package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Usage exit codes, as the binaries document them: 0 after the help, 2 for
// a command line the command refuses.
const (
	ExitHelp  = 0
	ExitUsage = 2
)

// NewFlagSet is a flag set named after the command ("scorerefresh status")
// whose usage is help, then its flags' defaults when it has any. The usage
// goes to the set's output: stderr on a mistake, stdout when asked for
// (Parse switches it).
func NewFlagSet(name, help string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { PrintUsage(fs, help) }
	return fs
}

// PrintUsage writes help and fs's flags to fs's output; a help whose
// command has flags ends by introducing them ("Flags:").
func PrintUsage(fs *flag.FlagSet, help string) {
	fmt.Fprint(fs.Output(), help)
	fs.PrintDefaults()
}

// WantsHelp reports whether args ask for help anywhere before a "--". The
// whole line counts, not only its first word: an operator who appends
// --help to a command line that would otherwise run must get the help, and
// a flag parser stops at the first operand.
func WantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// Parse parses args into fs and says whether the command goes on. When it
// does not, code is the exit code: 0 after printing the usage on stdout for
// -h or --help, 2 after naming what is wrong, with the usage, on stderr (an
// undefined flag, a bad value, an operand where the command takes none).
// operands says whether the command takes operands after its flags; an
// operand that looks like a flag is refused even then (it is a flag put
// after the operands, which the parser does not read as one), unless it
// follows "--".
func Parse(fs *flag.FlagSet, args []string, operands bool, stdout io.Writer) (code int, ok bool) {
	if WantsHelp(args) {
		fs.SetOutput(stdout)
		fs.Usage()
		return ExitHelp, false
	}
	// The parser prints the usage itself, before returning: hold it until
	// it is known whether it was asked for ("-help=true") or a mistake.
	stderr, held := fs.Output(), new(bytes.Buffer)
	fs.SetOutput(held)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return ExitHelp, false
	}
	_, _ = held.WriteTo(stderr)
	if err != nil {
		return ExitUsage, false // the parser said what and printed the usage
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return 0, true
	}
	if !operands {
		return refuse(fs, "unexpected argument %q", rest[0])
	}
	if afterDashes := len(args) > len(rest) && args[len(args)-len(rest)-1] == "--"; !afterDashes {
		for _, a := range rest {
			if len(a) > 1 && strings.HasPrefix(a, "-") {
				return refuse(fs, "%q after the operands: flags go first (put -- before an operand that starts with -)", a)
			}
		}
	}
	return 0, true
}

// Refuse names what is wrong with the command line, prints the usage on
// stderr and returns the usage exit code, for checks Parse cannot make
// (a missing subcommand, a count of operands).
func Refuse(fs *flag.FlagSet, format string, args ...any) int {
	code, _ := refuse(fs, format, args...)
	return code
}

func refuse(fs *flag.FlagSet, format string, args ...any) (int, bool) {
	fmt.Fprintf(fs.Output(), "%s: %s\n\n", fs.Name(), fmt.Sprintf(format, args...))
	fs.Usage()
	return ExitUsage, false
}
