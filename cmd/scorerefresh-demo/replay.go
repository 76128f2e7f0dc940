package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/scorerefresh/scorerefresh/internal/replaycmd"
	"github.com/scorerefresh/scorerefresh/pkg/embedmongo"
	"github.com/scorerefresh/scorerefresh/pkg/redact"
)

// runReplay is `scorerefresh-demo replay`: the production binary's replay
// with the same flags, plus the one it cannot offer, --embedded, which
// replays into a fresh embedded server so no MongoDB is needed.
func runReplay(args, environ []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "compare" {
		return replaycmd.Compare("scorerefresh-demo replay compare", args[1:], stdout, stderr)
	}
	const name = "scorerefresh-demo replay"
	o, code, ok := replaycmd.ParseFlags(name, args, stdout, stderr)
	if !ok {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	server := ""
	if o.Embedded {
		srv, err := embedmongo.Start(ctx, embedmongo.Config{})
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 1
		}
		defer srv.Close()
		environ = append(environ, "MONGODB_URI="+srv.URI())
		server = "embedded FerretDB (SQLite)"
		fmt.Fprintf(stdout, "embedded MongoDB-compatible server (FerretDB, SQLite) at %s\n", srv.URI())
	}
	cfg, ok := replaycmd.ServiceConfig(name, environ, o, stderr)
	if !ok {
		return 2
	}
	if server == "" {
		server = redact.URI(cfg.MongoURI)
	}
	return replaycmd.Run(ctx, replaycmd.Build{Name: name, Version: "demo"}, o, cfg, server, stdout, stderr)
}
