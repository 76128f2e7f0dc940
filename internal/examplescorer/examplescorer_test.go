package examplescorer

import (
	"io"
	"os/exec"
	"strings"
	"testing"
)

// TestStartReadsWhereItListens: the first line gives the URL; Stop ends the
// process by SIGTERM, which a shell's sleep obeys.
func TestStartReadsWhereItListens(t *testing.T) {
	t.Parallel()
	p, err := Start(t.Context(), exec.Command("sh", "-c", "echo listening on http://127.0.0.1:1; echo more; exec sleep 60"), nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if p.URL != "http://127.0.0.1:1" {
		t.Errorf("URL %q", p.URL)
	}
	p.Stop()
	select {
	case <-p.Done:
	default:
		t.Error("Stop returned with the process running")
	}
}

// TestStartRefusesWhatIsNotAnAddress: a first line of something else, or an
// exit before any line, fails Start with what happened.
func TestStartRefusesWhatIsNotAnAddress(t *testing.T) {
	t.Parallel()
	for script, want := range map[string]string{
		"echo hello; exec sleep 60": `printed "hello", not where it listens`,
		"exit 3":                    "exited before it listened: exit status 3",
	} {
		_, err := Start(t.Context(), exec.Command("sh", "-c", script), nil, io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", script, err, want)
		}
	}
}

// TestStartPassesTheEnvironment: env is added to the process's own.
func TestStartPassesTheEnvironment(t *testing.T) {
	t.Parallel()
	p, err := Start(t.Context(), exec.Command("sh", "-c", `echo "listening on $WHERE"`), []string{"WHERE=http://here"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done
	if p.URL != "http://here" {
		t.Errorf("URL %q", p.URL)
	}
}
