package deploy

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestManifestDockerignore checks that the build context keeps what the
// production binary compiles from and leaves out the repository's history.
func TestManifestDockerignore(t *testing.T) {
	t.Parallel()
	ps := ParseDockerignore(string(readAsset(t, dockerignorePath)))
	if !ps.Ignores(".git/HEAD") {
		t.Errorf("%s: .git is sent to the build", dockerignorePath)
	}
	// Every file the production binary compiles from must reach the build.
	cmd := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f",
		`{{if .Module}}{{.Module.Path}}{{if .Module.Main}} {{.Dir}} {{join .GoFiles ","}},{{join .EmbedFiles ","}}{{end}}{{end}}`, productionPkg)
	cmd.Dir = repoFile(t, ".")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root := repoFile(t, ".")
	need := []string{"go.mod", "go.sum"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if strings.Contains(strings.ToLower(fields[0]), "ferretdb") {
			t.Errorf("%s depends on %s: the production image would carry the embedded server", productionPkg, fields[0])
		}
		if len(fields) < 3 {
			continue // another module
		}
		dir, err := filepath.Rel(root, fields[1])
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range strings.Split(fields[2], ",") {
			if f != "" {
				need = append(need, filepath.ToSlash(filepath.Join(dir, f)))
			}
		}
	}
	for _, f := range need {
		if ps.Ignores(f) {
			t.Errorf("%s excludes %s, which %s compiles from", dockerignorePath, f, productionPkg)
		}
	}
}
