package main

import (
	"context"
	"io"
	"time"

	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/internal/cli"
	"github.com/scorerefresh/scorerefresh/internal/ops"
)

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
