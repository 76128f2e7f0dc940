package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/internal/replaycmd"
	"github.com/scorerefresh/scorerefresh/pkg/redact"
	"github.com/scorerefresh/scorerefresh/replay"
)

// runReplay is `scorerefresh replay --in FILE|DIR [flags]` and
// `scorerefresh replay compare A.json B.json`.
func runReplay(args, environ []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "compare" {
		return replaycmd.Compare("scorerefresh replay compare", args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("scorerefresh replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o replay.Options
	o.Register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.Embedded {
		fmt.Fprintln(stderr, "scorerefresh replay: --embedded is not in this binary: the production build does not link the embedded server.\n"+
			"Run the demo build with the same flags instead:\n  go run ./cmd/scorerefresh-demo replay --embedded "+o.In)
		return 2
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintf(stderr, "scorerefresh replay: %v\n", err)
		return 2
	}
	cfg, err := config.Parse(append(environ, "LOG_LEVEL="+o.LogLevel))
	if err != nil {
		fmt.Fprintf(stderr, "scorerefresh replay: %v\n", err)
		return 2
	}
	// The replay's consumer serves metrics only when asked: a replay often
	// runs next to a service that holds METRICS_ADDR.
	cfg.MetricsAddr = o.MetricsAddr
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	b := replaycmd.Build{Name: "scorerefresh replay", Version: version, Revision: revision}
	return replaycmd.Run(ctx, b, o, cfg, redact.URI(cfg.MongoURI), stdout, stderr)
}
