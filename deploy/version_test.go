package deploy

// A release's version is written in one place, the VERSION file. Everything
// else that names it is checked against that file here: the latest release of
// CHANGELOG.md, the image the Kubernetes manifests run, and the version the
// Dockerfile bakes into the binary when no --build-arg VERSION is given
// (TestManifestDockerfileBuild builds it and runs `scorerefresh version`).
// docs/releasing.md lists the steps that change them together.

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const (
	versionPath   = "VERSION"
	changelogPath = "CHANGELOG.md"
	// imageRepo is the image the manifests run; its tag must be the release.
	imageRepo = "ghcr.io/scorerefresh/scorerefresh"
)

// releaseTagRE is a release's tag: v and a semantic version without
// pre-release or build suffix (docs/releasing.md).
var releaseTagRE = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$`)

// releaseVersion is the VERSION file's one line.
func releaseVersion(t *testing.T) string {
	t.Helper()
	raw := string(readAsset(t, versionPath))
	v, ok := strings.CutSuffix(raw, "\n")
	if !ok || strings.ContainsAny(v, "\r\n \t") || !releaseTagRE.MatchString(v) {
		t.Fatalf("%s holds %q: want one line such as v1.2.3 (v, then MAJOR.MINOR.PATCH) and a newline", versionPath, raw)
	}
	return v
}

// dockerBuildVersion runs the shell statements the Dockerfile's build runs
// before `go build` and returns the VERSION they leave, given --build-arg
// VERSION=override ("" for none).
func dockerBuildVersion(t *testing.T, b goBuild, override string) string {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH to run the Dockerfile's shell statements")
	}
	script := strings.Join(append(slices.Clone(b.Preamble), `printf %s "$VERSION"`), " && ")
	cmd := exec.CommandContext(t.Context(), sh, "-c", script)
	cmd.Dir = repoFile(t, ".")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VERSION=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if override != "" {
		cmd.Env = append(cmd.Env, "VERSION="+override)
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: the statements before go build (%s) failed: %v", dockerfilePath, script, err)
	}
	return string(out)
}

func TestVersionDockerfile(t *testing.T) {
	t.Parallel()
	want := releaseVersion(t)
	b := findGoBuild(t, loadDockerfile(t))
	for _, in := range b.Stage.Lines {
		if in.Cmd == "ARG" && strings.HasPrefix(in.Args, "VERSION=") {
			t.Errorf("%s:%d: ARG %s: a second copy of the version; leave ARG VERSION without a default so %s supplies it", dockerfilePath, in.Line, in.Args, versionPath)
		}
	}
	if got := dockerBuildVersion(t, b, ""); got != want {
		t.Errorf("%s: without --build-arg VERSION the build uses %q, want %s's %q", dockerfilePath, got, versionPath, want)
	}
	if got := dockerBuildVersion(t, b, "v9.8.7-rc.1"); got != "v9.8.7-rc.1" {
		t.Errorf("%s: --build-arg VERSION=v9.8.7-rc.1 gives %q: the argument must win over %s", dockerfilePath, got, versionPath)
	}
	if ParseDockerignore(string(readAsset(t, dockerignorePath))).Ignores(versionPath) {
		t.Errorf("%s excludes %s: the image build cannot read its version", dockerignorePath, versionPath)
	}
}

// changelogRelease is one "## [x.y.z] - YYYY-MM-DD" heading.
type changelogRelease struct {
	Version, Date string
	Line          int
}

var changelogHeadingRE = regexp.MustCompile(`^## \[([^\]]+)\](?: - (\S+))?\s*$`)

func TestVersionChangelog(t *testing.T) {
	t.Parallel()
	want := releaseVersion(t)
	src := string(readAsset(t, changelogPath))
	var heads []changelogRelease
	for i, line := range strings.Split(src, "\n") {
		if m := changelogHeadingRE.FindStringSubmatch(line); m != nil {
			heads = append(heads, changelogRelease{Version: m[1], Date: m[2], Line: i + 1})
		} else if strings.HasPrefix(line, "## ") {
			t.Errorf("%s:%d: %q: want ## [Unreleased] or ## [x.y.z] - YYYY-MM-DD", changelogPath, i+1, line)
		}
	}
	if len(heads) < 2 || heads[0].Version != "Unreleased" {
		t.Fatalf("%s: want an ## [Unreleased] section first, then the releases, newest first", changelogPath)
	}
	if latest := "v" + heads[1].Version; latest != want {
		t.Errorf("%s:%d: the latest release is %s, %s says %s", changelogPath, heads[1].Line, latest, versionPath, want)
	}
	var prev [3]int
	for i, h := range heads[1:] {
		v, ok := LeadingVersion(h.Version)
		if !ok || !releaseTagRE.MatchString("v"+h.Version) {
			t.Errorf("%s:%d: [%s] is not a release version (MAJOR.MINOR.PATCH)", changelogPath, h.Line, h.Version)
			continue
		}
		if _, err := time.Parse(time.DateOnly, h.Date); err != nil {
			t.Errorf("%s:%d: [%s] has date %q, want YYYY-MM-DD", changelogPath, h.Line, h.Version, h.Date)
		}
		if i > 0 && slices.Compare(v[:], prev[:]) >= 0 {
			t.Errorf("%s:%d: [%s] is not older than the release above it", changelogPath, h.Line, h.Version)
		}
		prev = v
	}
	for _, h := range heads {
		if !strings.Contains(src, "\n["+h.Version+"]: ") {
			t.Errorf("%s: no link reference [%s]: at the bottom", changelogPath, h.Version)
		}
	}
}

func TestVersionManifestImages(t *testing.T) {
	t.Parallel()
	want := imageRepo + ":" + releaseVersion(t)
	found := 0
	root := repoFile(t, k8sBaseDir)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Ext(path) != ".yaml" && filepath.Ext(path) != ".yml") {
			return err
		}
		rel, _ := filepath.Rel(repoFile(t, "."), path)
		rel = filepath.ToSlash(rel)
		for _, doc := range yamlDocuments(t, rel) {
			for _, ref := range imageRefs(doc) {
				if strings.HasPrefix(ref, imageRepo+":") || strings.HasPrefix(ref, imageRepo+"@") || ref == imageRepo {
					found++
					if ref != want {
						t.Errorf("%s: image %s, want %s (the release in %s)", rel, ref, want, versionPath)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatalf("no manifest under %s runs %s", k8sBaseDir, imageRepo)
	}
}

// imageRefs returns the values of every "image" key in a YAML tree.
func imageRefs(n *yaml.Node) []string {
	var refs []string
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k, v := n.Content[i], n.Content[i+1]; k.Value == "image" && v.Kind == yaml.ScalarNode {
				refs = append(refs, v.Value)
			}
		}
	}
	for _, c := range n.Content {
		refs = append(refs, imageRefs(c)...)
	}
	return refs
}

// TestVersionExampleOverlay: the example overlay runs this release and links
// to its runbook, like the base.
func TestVersionExampleOverlay(t *testing.T) {
	t.Parallel()
	const dir = "deploy/overlays/example"
	var k kustomization
	decodeYAML(t, dir+"/kustomization.yaml", &k)
	v := releaseVersion(t)
	for _, img := range k.Images {
		if img.Name == imageRepo && img.NewTag != v {
			t.Errorf("%s/kustomization.yaml: %s at %s, want the release %s", dir, img.Name, img.NewTag, v)
		}
	}
	var settings struct {
		Data map[string]string `yaml:"data"`
	}
	decodeYAML(t, dir+"/settings.yaml", &settings)
	if got := settings.Data["runbookBase"]; got != runbookBase(t) {
		t.Errorf("%s/settings.yaml: runbookBase %s, want this release's %s", dir, got, runbookBase(t))
	}
}
