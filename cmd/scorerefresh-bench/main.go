// Command scorerefresh-bench measures scorerefresh against the consumer it
// replaces (package bench; docs/performance.md):
//
//	go run ./cmd/scorerefresh-bench -out bench/results          # the full run (about 25 minutes)
//	go run ./cmd/scorerefresh-bench -short -out /tmp/bench       # the smoke run CI does (seconds)
//
// Exit codes: 0 done, 1 the run failed, 2 bad flags.
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

func run(args, environ []string, stdout, stderr io.Writer) int {
	cfg, err := bench.ParseArgs(args, stderr)
	if err == nil {
		cfg.Environ, cfg.Log = environ, stdout
		cfg.Command = strings.Join(append([]string{"go run ./cmd/scorerefresh-bench"}, args...), " ")
		var b *bench.Bench
		if b, err = bench.New(cfg); err == nil {
			return runBench(b, cfg.CPUProfile, stderr)
		}
	}
	if !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stderr, "scorerefresh-bench: %v\n", err)
	}
	return 2
}

// runBench runs b under a CPU profile when one is asked for, until it ends
// or a signal stops it.
func runBench(b *bench.Bench, cpuProfile string, stderr io.Writer) int {
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err == nil {
			defer f.Close()
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "scorerefresh-bench: %v\n", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if _, err := b.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "scorerefresh-bench: %v\n", err)
		return 1
	}
	return 0
}
