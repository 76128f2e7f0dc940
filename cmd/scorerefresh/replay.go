package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/scorerefresh/scorerefresh/internal/replaycmd"
	"github.com/scorerefresh/scorerefresh/pkg/redact"
)

func runReplay(args, environ []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "compare" {
		return replaycmd.Compare("scorerefresh replay compare", args[1:], stdout, stderr)
	}
	const name = "scorerefresh replay"
	o, code, ok := replaycmd.ParseFlags(name, args, stdout, stderr)
	if !ok {
		return code
	}
	if o.Embedded {
		fmt.Fprintln(stderr, name+": --embedded is not in this binary: the production build does not link the embedded server.\n"+
			"Run the demo build with the same flags instead:\n  go run ./cmd/scorerefresh-demo replay --embedded "+o.In)
		return 2
	}
	cfg, ok := replaycmd.ServiceConfig(name, environ, o, stderr)
	if !ok {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	b := replaycmd.Build{Name: name, Version: version, Revision: revision}
	return replaycmd.Run(ctx, b, o, cfg, redact.URI(cfg.MongoURI), stdout, stderr)
}
