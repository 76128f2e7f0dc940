package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/scorerefresh/scorerefresh/internal/config"
)

// cliRun is one run of the binary: its exit code, its output, and whether
// it opened a connection to its MONGODB_URI.
type cliRun struct {
	code           int
	stdout, stderr string
	connected      bool
}

// runCLI runs the binary with args in an environment of its own whose
// MONGODB_URI (with a password) points at a listener of the test's. A
// command that connects is killed once the listener accepts it: what it
// would have done next is what the test must prove it never starts.
func runCLI(t *testing.T, extraEnv []string, args ...string) cliRun {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan string, 64) // remote addresses, in the order accepted
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c.RemoteAddr().String()
			_ = c.Close()
		}
	}()

	cmd := exec.Command(buildBinary(t), args...)
	// Not os.Environ: the developer's own MONGODB_URI must not be the one
	// the command would reach.
	cmd.Env = append([]string{
		"MONGODB_URI=mongodb://app:hunter2@" + ln.Addr().String() + "/?directConnection=true",
		"METRICS_ADDR=127.0.0.1:0",
	}, extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	r := cliRun{}
	select {
	case <-accepted:
		r.connected = true
		_ = cmd.Process.Kill()
		<-done
	case <-done:
		// It exited: any connection it made is queued on the listener
		// ahead of one made now, since the kernel accepts in order. Dial
		// and drain up to that one.
		sentinel, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer sentinel.Close()
		for addr := range accepted {
			if addr == sentinel.LocalAddr().String() {
				break
			}
			r.connected = true
		}
	}
	r.code = cmd.ProcessState.ExitCode()
	r.stdout, r.stderr = stdout.String(), stderr.String()
	if strings.Contains(r.stdout+r.stderr, "hunter2") {
		t.Errorf("%q printed MONGODB_URI's password:\n%s%s", args, r.stdout, r.stderr)
	}
	return r
}

func (r cliRun) String() string {
	return fmt.Sprintf("exit %d, connected %t\nstdout:\n%s\nstderr:\n%s", r.code, r.connected, r.stdout, r.stderr)
}

// cliCase is one command of the binary with a command line it would run.
type cliCase struct {
	words    []string // "deadletters", "list"
	valid    []string // the rest of a line the command accepts and runs
	operands bool     // it takes any number of operands: a stray one is not a mistake
}

func cliCases(t *testing.T) []cliCase {
	dir := t.TempDir()
	return []cliCase{
		{words: []string{"run"}},
		{words: []string{"snapshot"}, valid: []string{"--out", filepath.Join(dir, "snap")}},
		{words: []string{"replay"}, valid: []string{"--in", dir, "--drain"}},
		{words: []string{"replay", "compare"}, valid: []string{filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")}},
		{words: []string{"backlog"}},
		{words: []string{"backlog", "generate"}, valid: []string{"--out", filepath.Join(dir, "gen"), "--entries", "10", "--users", "2"}},
		{words: []string{"status"}, valid: []string{"--sample", "0"}},
		{words: []string{"deadletters"}},
		{words: []string{"deadletters", "list"}, valid: []string{"--limit", "5"}},
		{words: []string{"deadletters", "show"}, valid: []string{"dl1"}, operands: true},
		{words: []string{"deadletters", "redrive"}, valid: []string{"--reason", "max_attempts"}},
		{words: []string{"deadletters", "purge"}, valid: []string{"--reason", "malformed", "--yes"}},
		{words: []string{"doctor"}, valid: []string{"--replicas", "2"}},
		{words: []string{"plan"}, valid: []string{"--from-queue", "--measure"}},
		{words: []string{"version"}},
	}
}

func line(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestEveryCommandAnswersHelpAndStartsNothing: `run --help` used to start
// the service. -h and --help, alone or at the end of a line that would
// run, print the usage on stdout and exit 0, and nothing connects.
func TestEveryCommandAnswersHelpAndStartsNothing(t *testing.T) {
	t.Parallel()
	for _, c := range cliCases(t) {
		t.Run(strings.Join(c.words, "_"), func(t *testing.T) {
			t.Parallel()
			for _, args := range [][]string{
				line(c.words, []string{"-h"}),
				line(c.words, []string{"--help"}),
				line(c.words, c.valid, []string{"--help"}),
			} {
				r := runCLI(t, nil, args...)
				if r.code != 0 || r.connected || !strings.HasPrefix(r.stdout, "usage: scorerefresh "+c.words[0]) {
					t.Errorf("%q: want exit 0, no connection, the usage on stdout; %s", args, r)
				}
			}
		})
	}
}

// TestEveryCommandRefusesWhatItDoesNotTake: an undefined flag, or an
// operand where the command takes none, is refused with exit 2 and named,
// with the usage, on stderr; nothing connects.
func TestEveryCommandRefusesWhatItDoesNotTake(t *testing.T) {
	t.Parallel()
	for _, c := range cliCases(t) {
		t.Run(strings.Join(c.words, "_"), func(t *testing.T) {
			t.Parallel()
			type bad struct {
				args []string
				name string // what stderr must name
			}
			cases := []bad{{line(c.words, []string{"--no-such-flag"}, c.valid), "no-such-flag"}}
			if c.operands {
				cases = append(cases, bad{line(c.words, c.valid, []string{"--no-such-flag"}), "--no-such-flag"})
			} else {
				cases = append(cases, bad{line(c.words, c.valid, []string{"stray"}), `"stray"`})
			}
			for _, b := range cases {
				r := runCLI(t, nil, b.args...)
				if r.code != 2 || r.connected || !strings.Contains(r.stderr, b.name) || !strings.Contains(r.stderr, "usage: scorerefresh "+c.words[0]) || r.stdout != "" {
					t.Errorf("%q: want exit 2, no connection, %s and the usage on stderr, nothing on stdout; %s", b.args, b.name, r)
				}
			}
		})
	}
}

// TestRunHelpListsEveryVariableWithItsDefault reads the variables off
// config.Config's env tags and their defaults off config.Defaults, so a
// variable added there and missing from the help fails here. The
// environment sets other values: the help must print the defaults.
func TestRunHelpListsEveryVariableWithItsDefault(t *testing.T) {
	t.Parallel()
	r := runCLI(t, []string{"CLAIM_WINDOW=777", "LEASE_DURATION=7m", "MONGODB_DATABASE=prod-secret-db"}, "run", "--help")
	if r.code != 0 || r.connected {
		t.Fatalf("run --help: %s", r)
	}
	if strings.Contains(r.stdout, "CLAIM_WINDOW=777") || strings.Contains(r.stdout, "LEASE_DURATION=7m") || strings.Contains(r.stdout, "prod-secret-db") {
		t.Errorf("run --help printed the environment's values, not the defaults:\n%s", r.stdout)
	}
	printed := map[string]string{} // variable → the default printed
	helped := map[string]bool{}    // variable → a line of help under it
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	last := ""
	for sc.Scan() {
		text := sc.Text()
		if name, def, ok := strings.Cut(strings.TrimPrefix(text, "  "), "="); ok && strings.HasPrefix(text, "  ") && !strings.HasPrefix(text, "   ") {
			printed[name], last = def, name
			continue
		}
		if last != "" && strings.HasPrefix(text, "      ") && strings.TrimSpace(text) != "" {
			helped[last] = true
		}
		last = ""
	}
	defaults := reflect.ValueOf(config.Defaults())
	typ := defaults.Type()
	for i := range typ.NumField() {
		name := strings.Split(typ.Field(i).Tag.Get("env"), ",")[0]
		def, ok := printed[name]
		if !ok {
			t.Errorf("run --help does not list %s (Config.%s)", name, typ.Field(i).Name)
			continue
		}
		if !helped[name] {
			t.Errorf("run --help gives %s no meaning", name)
		}
		if err := sameDefault(defaults.Field(i).Interface(), def); err != nil {
			t.Errorf("run --help: %s=%s: %v", name, def, err)
		}
	}
}

// sameDefault reports whether printed, as an operator would set it, is v.
func sameDefault(v any, printed string) error {
	if d, ok := v.(time.Duration); ok {
		got, err := time.ParseDuration(printed)
		if err != nil || got != d {
			return fmt.Errorf("the default is %s", d)
		}
		return nil
	}
	if want := fmt.Sprint(v); printed != want {
		return errors.New("the default is " + want)
	}
	return nil
}
