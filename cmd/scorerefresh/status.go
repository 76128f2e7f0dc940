package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/internal/cli"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/internal/ops"
)

const statusHelp = `usage: scorerefresh status [--json] [--top N] [flags]

What the queue holds now, read from the collections (no Prometheus needed):
depth, oldest entry, the users with the most entries, leases held per replica,
users backing off (next attempt, last error), dead letters by reason and age,
and arrivals against acknowledgements from two samples --sample apart.

Its cost is bounded whatever the depth: 16 round trips (26 with the rates),
each bounded:
  - counts are exact up to --exact-limit and the collection's estimated count
    (metadata, O(1)) past it, marked "estimated";
  - top users come from the oldest --window entries (only _id, username and
    createdAt are read), marked as a window when the queue holds more;
  - dead letters by reason come from the newest --window of them, oldest and
    newest from the deadLetter.at index;
  - at most --lease-limit held leases are read;
  - rates are lower bounds: entries that arrive and are acknowledged between
    the two samples are in neither figure (see docs/operator-commands.md).

It reads the same environment as "scorerefresh run". Flags:
`

func runStatus(args, environ []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("scorerefresh status", statusHelp, stderr)
	asJSON := fs.Bool("json", false, "print one JSON document (schemaVersion 1, kind \"status\")")
	var o ops.StatusOptions
	fs.IntVar(&o.Top, "top", 10, "users listed among the top users and the backoffs")
	fs.IntVar(&o.Window, "window", 10_000, "documents read at most for the top users and for the dead letters by reason")
	fs.Int64Var(&o.ExactLimit, "exact-limit", 100_000, "counts are exact up to this, estimated past it")
	fs.IntVar(&o.LeaseLimit, "lease-limit", 10_000, "held leases read at most")
	fs.DurationVar(&o.Sample, "sample", 5*time.Second, "gap between the two samples of arrivals and acknowledgements; 0 skips them")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	if code, ok := cli.Parse(fs, args, false, stdout); !ok {
		return code
	}
	if o.Top <= 0 || o.Window <= 0 || o.ExactLimit <= 0 || o.LeaseLimit <= 0 || o.Sample < 0 {
		return cli.Refuse(fs, "--top, --window, --exact-limit and --lease-limit must be positive, --sample not negative")
	}
	return withOps("scorerefresh status", environ, *timeout, stderr, func(ctx context.Context, env *ops.Env) int {
		s, err := ops.GatherStatus(ctx, env.Colls, o)
		if err != nil {
			return fail(stderr, "scorerefresh status", err)
		}
		return emit("scorerefresh status", stdout, stderr, *asJSON, s, func() error { return ops.WriteStatus(stdout, s) })
	})
}

// withOps connects an operator command exactly as `run` connects (same
// environment, loader and client options) and runs f, or returns 2 when it
// cannot. A zero timeout means none (the command stops on SIGINT or SIGTERM).
func withOps(name string, environ []string, timeout time.Duration, stderr io.Writer, f func(context.Context, *ops.Env) int) int {
	cfg, err := config.Parse(environ)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	env, err := ops.Open(ctx, cfg, version, revision)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	defer env.Close(context.Background())
	return f(ctx, env)
}

// fail says on stderr what stopped the command: exit code 1.
func fail(stderr io.Writer, name string, err error) int {
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return 1
}

// emit prints v as one JSON document with asJSON, else as text prints it:
// exit code 0, or 1 when it cannot.
func emit(name string, stdout, stderr io.Writer, asJSON bool, v any, text func() error) int {
	var err error
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(v)
	} else {
		err = text()
	}
	if err != nil {
		return fail(stderr, name, err)
	}
	return 0
}

const doctorHelp = `usage: scorerefresh doctor [--replicas N] [--json]

Preflight checks against the configured MongoDB, printed as a table (ok, warn,
fail, with the fix under each problem); exits 1 when a check fails. It changes
nothing: it reads, explains (queryPlanner: nothing runs) and opens and closes
one change stream.

  server version and topology (replica set or sharded, for change streams),
  the service's indexes, the plan of each hot query (claim window, absorb, ack
  delete by _id, lease read), every scoring rule's source collection and its
  index on userField (and timeField with a window), the permissions of every
  operation (connectionStatus), the fleet's connections against the server's
  (serverStatus), and this host's clock against the server's.

What a server cannot answer (the embedded FerretDB has no plans, privileges
or connection figures) is a warning, not a failure.

It reads the same environment as "scorerefresh run". Flags:
`

func runDoctor(args, environ []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("scorerefresh doctor", doctorHelp, stderr)
	replicas := fs.Int("replicas", 2, "replicas the fleet runs (KEDA: its maxReplicaCount); one more is counted for a rollout")
	asJSON := fs.Bool("json", false, "print one JSON document (schemaVersion 1, kind \"doctor\")")
	timeout := fs.Duration("timeout", time.Minute, "give up after this long")
	if code, ok := cli.Parse(fs, args, false, stdout); !ok {
		return code
	}
	if *replicas <= 0 {
		return cli.Refuse(fs, "--replicas must be positive")
	}
	return withOps("scorerefresh doctor", environ, *timeout, stderr, func(ctx context.Context, env *ops.Env) int {
		cfg := env.Config
		r := ops.Doctor(ctx, ops.DoctorConfig{
			Colls: env.Colls, Rules: env.Rules, Replicas: *replicas,
			PoolSize: int(app.PoolSize(cfg)), PerReplica: app.ConnectionsPerReplica(cfg),
			ClaimWindow: cfg.ClaimWindow, LeaseDuration: cfg.LeaseDuration,
		})
		if code := emit("scorerefresh doctor", stdout, stderr, *asJSON, r, func() error { return ops.WriteDoctor(stdout, r) }); code != 0 || r.Failures == 0 {
			return code
		}
		return 1
	})
}
