// Command scorerefresh is the production binary (docs/contract.md): the
// service (`run`, the container's command) and the operator commands the
// usage below lists. Configuration comes from the environment only. This
// binary never links the embedded MongoDB server: the demo is
// cmd/scorerefresh-demo.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/scorerefresh/scorerefresh/internal/cli"
	"github.com/scorerefresh/scorerefresh/internal/plancmd"
	"github.com/scorerefresh/scorerefresh/internal/replaycmd"
	"github.com/scorerefresh/scorerefresh/service"
)

// Set at build time: -ldflags "-X main.version=v1.2.3 -X main.revision=abc123".
var (
	version  = "dev"
	revision = "unknown"
)

const usage = `usage: scorerefresh <command>

commands:
  run       drain the queue (configured by environment variables: run -h lists them)
  snapshot  --out FILE|DIR [--with-sources]: write the queue as Extended JSON lines
  replay    --in FILE|DIR [--drain]: load a snapshot or mongoexport file, drain it, report
            (replay compare A.json B.json: two drain reports side by side)
  backlog   generate --shape S --entries N --users M --out DIR: a synthetic snapshot
  status    [--json] [--top N]: depth, oldest age, top users, leases per replica,
            backoffs, dead letters by reason, arrivals vs acks (bounded reads)
  deadletters list|show|redrive|purge [--reason R] [--user U] [--since T] [--until T]
            [--limit N] [--dry-run] [--yes]: inspect dead letters, put them back in
            the queue (idempotent, crash-safe) or delete them
  doctor    [--replicas N] [--json]: preflight checks against the configured MongoDB
            (topology, indexes, query plans, source indexes, permissions,
            connections, clock); exits 1 when a check fails
  plan      --in FILE|DIR|--from-queue --rtt D|--measure: drain time, replicas, stability (--help)
  version   print the version

status, deadletters and doctor read the same environment as run (MONGODB_URI,
MONGODB_DATABASE, the collection names, SCORING_RULES, ...); "<command> -h"
describes each one's flags and what it reads, and "run -h" every variable
with its default. Help never connects to anything or starts anything. See
docs/operator-commands.md.
`

func main() {
	os.Exit(runWith(os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr))
}

func runWith(args, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return dispatch("scorerefresh: unknown command", usage, args, stdout, stderr, map[string]func([]string) int{
		// service.Run refuses every argument: a mistyped flag or a request
		// for help must never start the service, since whoever types it may
		// have production's environment loaded.
		"run": func(a []string) int {
			return service.Run(a, environ, stdout, stderr, service.Options{Version: version, Revision: revision})
		},
		"replay": func(a []string) int {
			return replaycmd.Main(replaycmd.Build{Name: "scorerefresh replay", Version: version, Revision: revision}, a, environ, stdout, stderr)
		},
		"snapshot":    func(a []string) int { return runSnapshot(a, environ, stdout, stderr) },
		"backlog":     func(a []string) int { return runBacklog(a, environ, stdout, stderr) },
		"status":      func(a []string) int { return runStatus(a, environ, stdout, stderr) },
		"deadletters": func(a []string) int { return runDeadLetters(a, environ, stdin, stdout, stderr) },
		"doctor":      func(a []string) int { return runDoctor(a, environ, stdout, stderr) },
		"plan":        func(a []string) int { return plancmd.Run(a, environ, stdout, stderr) },
		"version":     func(a []string) int { return runVersion(a, stdout, stderr) },
		"--version":   func(a []string) int { return runVersion(a, stdout, stderr) },
	})
}

// dispatch runs the command args[0] names with the rest of args. Without
// one it prints help on stderr and exits 2, as after naming an unknown one;
// help, -h and --help print it on stdout.
func dispatch(unknown, help string, args []string, stdout, stderr io.Writer, commands map[string]func([]string) int) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, help)
		return 2
	}
	if run, ok := commands[args[0]]; ok {
		return run(args[1:])
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, help)
		return 0
	}
	fmt.Fprintf(stderr, "%s %q\n\n%s", unknown, args[0], help)
	return 2
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("scorerefresh version", "usage: scorerefresh version\n\nPrints the build's version and revision.\n", stderr)
	if code, ok := cli.Parse(fs, args, false, stdout); !ok {
		return code
	}
	fmt.Fprintf(stdout, "scorerefresh %s (revision %s)\n", version, revision)
	return 0
}
