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
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		// service.Run refuses every argument: a mistyped flag or a request
		// for help must never start the service, since whoever types it may
		// have production's environment loaded.
		return service.Run(args[1:], environ, stdout, stderr, service.Options{Version: version, Revision: revision})
	case "snapshot":
		return runSnapshot(args[1:], environ, stdout, stderr)
	case "replay":
		return runReplay(args[1:], environ, stdout, stderr)
	case "backlog":
		return runBacklog(args[1:], environ, stdout, stderr)
	case "status":
		return runStatus(args[1:], environ, stdout, stderr)
	case "deadletters":
		return runDeadLetters(args[1:], environ, stdin, stdout, stderr)
	case "doctor":
		return runDoctor(args[1:], environ, stdout, stderr)
	case "plan":
		return plancmd.Run(args[1:], environ, stdout, stderr)
	case "version", "--version":
		return runVersion(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "scorerefresh: unknown command %q\n\n%s", args[0], usage)
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
