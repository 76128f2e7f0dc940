// Command scorerefresh-bench runs the bench's table of scenarios (package
// bench; docs/performance.md says how). Exit codes: 0 done, 1 the run
// failed, 2 bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/scorerefresh/scorerefresh/bench"
)

func main() {
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

// run runs the bench under a CPU profile when one is asked for, until it
// ends or a signal stops it.
func run(args, environ []string, stdout, stderr io.Writer) int {
	cfg, err := bench.ParseArgs(args, stderr)
	cfg.Environ, cfg.Log = environ, stdout
	cfg.Command = strings.Join(append([]string{"go run ./cmd/scorerefresh-bench"}, args...), " ")
	var b *bench.Bench
	if err == nil {
		b, err = bench.New(cfg)
	}
	if err == nil && cfg.CPUProfile != "" {
		var f *os.File
		if f, err = os.Create(cfg.CPUProfile); err == nil {
			defer f.Close()
			err = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "scorerefresh-bench: %v\n", err)
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if _, err := b.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "scorerefresh-bench: %v\n", err)
		return 1
	}
	return 0
}
