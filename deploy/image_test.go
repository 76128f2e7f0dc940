package deploy

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImageModule runs the tests and vet of deploy/image, the OCI image
// builder. It is a module of its own, so that go-containerregistry stays out
// of the service's go.mod, and `go test ./...` at the root does not enter it.
func TestImageModule(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cross-compiles the service for two platforms")
	}
	for _, args := range [][]string{{"vet", "./..."}, {"test", "-count=1", "-timeout", "18m", "./..."}} {
		cmd := exec.CommandContext(t.Context(), "go", args...)
		cmd.Dir = repoFile(t, "deploy/image")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("go %s in deploy/image: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestServiceDoesNotDependOnTheImageBuilder: the image builder's
// dependencies are its own module's.
func TestServiceDoesNotDependOnTheImageBuilder(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"go.mod", "go.sum"} {
		if strings.Contains(string(readAsset(t, f)), "go-containerregistry") {
			t.Errorf("%s names go-containerregistry: the image builder (deploy/image) must stay a module of its own", f)
		}
	}
}
