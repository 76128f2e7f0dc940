package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func loadDockerfile(t *testing.T) []Stage {
	t.Helper()
	stages, err := ParseDockerfile(string(readAsset(t, dockerfilePath)))
	if err != nil {
		t.Fatalf("%s: %v", dockerfilePath, err)
	}
	if len(stages) < 2 {
		t.Fatalf("%s: %d stages, want a multi-stage build (build, then a minimal runtime)", dockerfilePath, len(stages))
	}
	return stages
}

// goBuild is the `go build` command of the Dockerfile's build stage.
type goBuild struct {
	Stage    Stage
	Preamble []string          // NAME=value statements run before it (NAME=... && go build)
	Env      map[string]string // assignments before `go` and ENV of the stage
	Args     []string          // after `go build`
	Ldflags  string
	Output   string
	Pkgs     []string
}

func findGoBuild(t *testing.T, stages []Stage) goBuild {
	t.Helper()
	var found []goBuild
	for _, st := range stages {
		stageEnv := map[string]string{}
		for _, in := range st.Lines {
			if in.Cmd == "ENV" {
				for _, kv := range strings.Fields(in.Args) {
					if k, v, ok := strings.Cut(kv, "="); ok {
						stageEnv[k] = v
					}
				}
			}
			if in.Cmd != "RUN" || !strings.Contains(in.Args, "go build") {
				continue
			}
			words, err := ShellWords(in.Args)
			if err != nil {
				t.Fatalf("%s:%d: %v", dockerfilePath, in.Line, err)
			}
			for len(words) > 0 && strings.HasPrefix(words[0], "--") { // RUN --mount=...
				words = words[1:]
			}
			b := goBuild{Stage: st, Env: map[string]string{}}
			for k, v := range stageEnv {
				b.Env[k] = v
			}
			i := 0
			for {
				for ; i < len(words) && strings.Contains(words[i], "=") && !strings.HasPrefix(words[i], "-"); i++ {
					k, v, _ := strings.Cut(words[i], "=")
					b.Env[k] = v
				}
				if i >= len(words) || words[i] != "&&" {
					break
				}
				// Assignments that were statements of their own (VERSION="${VERSION:-...}" &&).
				for k, v := range b.Env {
					if _, ok := stageEnv[k]; !ok {
						b.Preamble = append(b.Preamble, k+"="+v)
						delete(b.Env, k)
					}
				}
				i++
			}
			if i+1 >= len(words) || words[i] != "go" || words[i+1] != "build" {
				t.Fatalf("%s:%d: the RUN that builds must start with [VAR=value ...] go build, got %q", dockerfilePath, in.Line, in.Args)
			}
			for _, w := range words[i+2:] {
				if w == "&&" || w == ";" || w == "||" || w == "|" {
					break
				}
				b.Args = append(b.Args, w)
			}
			for j := 0; j < len(b.Args); j++ {
				a := b.Args[j]
				switch {
				case a == "-ldflags" && j+1 < len(b.Args):
					b.Ldflags = b.Args[j+1]
					j++
				case strings.HasPrefix(a, "-ldflags="):
					b.Ldflags = strings.TrimPrefix(a, "-ldflags=")
				case a == "-o" && j+1 < len(b.Args):
					b.Output = b.Args[j+1]
					j++
				case !strings.HasPrefix(a, "-"):
					b.Pkgs = append(b.Pkgs, a)
				}
			}
			found = append(found, b)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: %d RUN instructions with go build, want exactly 1", dockerfilePath, len(found))
	}
	return found[0]
}

// dockerfileUser is the final stage's USER as numbers.
func dockerfileUser(t *testing.T, stages []Stage) (uid, gid int64) {
	t.Helper()
	user := ""
	for _, in := range stages[len(stages)-1].Lines {
		if in.Cmd == "USER" {
			user = in.Args
		}
	}
	if user == "" {
		t.Fatalf("%s: the final stage sets no USER: the container would run as root", dockerfilePath)
	}
	u, g, hasGroup := strings.Cut(user, ":")
	uid, err := strconv.ParseInt(u, 10, 64)
	if err != nil {
		t.Fatalf("%s: USER %s: want a numeric uid, which Kubernetes' runAsNonRoot can verify", dockerfilePath, user)
	}
	gid = uid
	if hasGroup {
		if gid, err = strconv.ParseInt(g, 10, 64); err != nil {
			t.Fatalf("%s: USER %s: want a numeric gid", dockerfilePath, user)
		}
	}
	if uid == 0 || gid == 0 {
		t.Fatalf("%s: USER %s is root", dockerfilePath, user)
	}
	return uid, gid
}

// packageVars lists the package-level variables of a Go file.
func packageVars(t *testing.T, rel string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), rel, readAsset(t, rel), parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.VAR {
			continue
		}
		for _, s := range gd.Specs {
			for _, n := range s.(*ast.ValueSpec).Names {
				names[n.Name] = true
			}
		}
	}
	return names
}

// ldflagsVars maps the variables -X sets (main.version) to their values.
func ldflagsVars(t *testing.T, ldflags string) map[string]string {
	t.Helper()
	words, err := ShellWords(ldflags)
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]string{}
	for i := 0; i < len(words); i++ {
		if words[i] == "-X" && i+1 < len(words) {
			k, v, _ := strings.Cut(words[i+1], "=")
			set[k] = v
			i++
		}
	}
	return set
}

func TestManifestDockerfile(t *testing.T) {
	t.Parallel()
	stages := loadDockerfile(t)
	vars := configVars(t)

	t.Run("base images pinned", func(t *testing.T) {
		t.Parallel()
		names := map[string]bool{}
		for _, st := range stages {
			switch {
			case names[st.From], st.From == "scratch":
			default:
				if err := ImagePinned(st.From); err != nil {
					t.Errorf("%s: FROM %s", dockerfilePath, err)
				}
			}
			if st.Name != "" {
				names[st.Name] = true
			}
		}
	})

	t.Run("static production binary with version", func(t *testing.T) {
		t.Parallel()
		b := findGoBuild(t, stages)
		if b.Env["CGO_ENABLED"] != "0" {
			t.Errorf("%s: go build without CGO_ENABLED=0: the binary would not be static", dockerfilePath)
		}
		if !slices.Equal(b.Pkgs, []string{productionPkg}) {
			t.Errorf("%s: go build builds %q, want only %s (the demo links the embedded server)", dockerfilePath, b.Pkgs, productionPkg)
		}
		if b.Output == "" {
			t.Errorf("%s: go build has no -o", dockerfilePath)
		}
		args := map[string]bool{}
		for _, in := range b.Stage.Lines {
			if in.Cmd == "ARG" {
				name, _, _ := strings.Cut(in.Args, "=")
				args[name] = true
			}
		}
		mainVars := packageVars(t, mainSourcePath)
		set := ldflagsVars(t, b.Ldflags)
		for _, v := range []string{"version", "revision"} {
			if !mainVars[v] {
				t.Errorf("%s declares no variable %s, which the Dockerfile sets with -X main.%s", mainSourcePath, v, v)
			}
			value, ok := set["main."+v]
			if !ok {
				t.Errorf("%s: ldflags %q lack -X main.%s=...", dockerfilePath, b.Ldflags, v)
				continue
			}
			name := strings.Trim(strings.TrimPrefix(value, "$"), "{}")
			if !strings.HasPrefix(value, "$") || !args[name] {
				t.Errorf("%s: -X main.%s=%s: want a build ARG of the build stage, so releases set it", dockerfilePath, v, value)
			}
		}
		for k := range set {
			if pkg, name, _ := strings.Cut(k, "."); pkg != "main" || !mainVars[name] {
				t.Errorf("%s: -X %s sets nothing in %s", dockerfilePath, k, mainSourcePath)
			}
		}
	})

	t.Run("builder satisfies go.mod", func(t *testing.T) {
		t.Parallel()
		var want [3]int
		for _, line := range strings.Split(string(readAsset(t, "go.mod")), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "go "); ok {
				want, _ = LeadingVersion(v)
			}
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "toolchain go"); ok {
				want, _ = LeadingVersion(v)
			}
		}
		b := findGoBuild(t, stages)
		if !strings.HasPrefix(b.Stage.From, "golang:") {
			t.Fatalf("%s: the build stage is FROM %s, want the official golang image", dockerfilePath, b.Stage.From)
		}
		got, ok := LeadingVersion(ImageTag(b.Stage.From))
		if !ok {
			t.Fatalf("%s: cannot read the Go version of %s", dockerfilePath, b.Stage.From)
		}
		if slices.Compare(got[:], want[:]) < 0 {
			t.Errorf("%s: %s is older than go.mod's go %d.%d.%d", dockerfilePath, b.Stage.From, want[0], want[1], want[2])
		}
	})

	t.Run("non-root runtime runs scorerefresh run", func(t *testing.T) {
		t.Parallel()
		final := stages[len(stages)-1]
		dockerfileUser(t, stages)
		var entrypoint, cmd []string
		copied := map[string]string{} // destination -> source
		exposed := map[string]bool{}
		for _, in := range final.Lines {
			switch in.Cmd {
			case "RUN":
				t.Errorf("%s:%d: RUN in the runtime stage: build everything in the build stage", dockerfilePath, in.Line)
			case "ENTRYPOINT", "CMD":
				argv, err := ExecForm(in)
				if err != nil {
					t.Fatalf("%s: %v", dockerfilePath, err)
				}
				if in.Cmd == "CMD" {
					cmd = argv
				} else {
					entrypoint = argv
				}
			case "COPY":
				f := strings.Fields(in.Args)
				if len(f) >= 2 {
					copied[f[len(f)-1]] = f[len(f)-2]
				}
			case "EXPOSE":
				for _, p := range strings.Fields(in.Args) {
					exposed[strings.TrimSuffix(p, "/tcp")] = true
				}
			}
		}
		argv := append(entrypoint, cmd...)
		if len(argv) != 2 || path.Base(argv[0]) != "scorerefresh" || argv[1] != "run" {
			t.Errorf("%s: ENTRYPOINT + CMD run %q, want [/path/to/scorerefresh run]", dockerfilePath, argv)
		} else if src, built := copied[argv[0]], findGoBuild(t, stages).Output; src != built {
			t.Errorf("%s: the entrypoint %s is copied from %q, not from the go build output %s", dockerfilePath, argv[0], src, built)
		}
		if port := strconv.Itoa(metricsPort(t, vars, nil)); !exposed[port] {
			t.Errorf("%s: EXPOSE lacks METRICS_ADDR's default port %s", dockerfilePath, port)
		}
	})
}

// TestManifestDockerfileBuild runs the Dockerfile's own go build command
// (flags, ldflags, environment) outside Docker and checks the binary it makes:
// static, version baked in, no embedded server.
func TestManifestDockerfileBuild(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the production binary")
	}
	b := findGoBuild(t, loadDockerfile(t))
	// VERSION as a build without --build-arg VERSION gets it: the release's
	// (version_test.go checks the override).
	version, revision := dockerBuildVersion(t, b, ""), "0123abcd"
	if want := releaseVersion(t); version != want {
		t.Errorf("%s: a build without --build-arg VERSION is version %q, want %s's %q", dockerfilePath, version, versionPath, want)
	}
	expand := func(s string) string {
		return os.Expand(s, func(k string) string {
			switch k {
			case "VERSION":
				return version
			case "REVISION":
				return revision
			}
			return "" // TARGETOS, TARGETARCH: this machine's
		})
	}
	bin := filepath.Join(t.TempDir(), "scorerefresh")
	var args []string
	for i := 0; i < len(b.Args); i++ {
		a := expand(b.Args[i])
		if a == "-o" {
			args = append(args, "-o", bin)
			i++
			continue
		}
		args = append(args, a)
	}
	cmd := exec.CommandContext(t.Context(), "go", append([]string{"build"}, args...)...)
	cmd.Dir = repoFile(t, ".")
	cmd.Env = os.Environ()
	for k, v := range b.Env {
		if v = expand(v); v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	out, err := exec.CommandContext(t.Context(), bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("scorerefresh version: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), version) || !strings.Contains(string(out), revision) {
		t.Errorf("scorerefresh version printed %q, want version %s and revision %s from the ldflags", out, version, revision)
	}
	info, err := exec.CommandContext(t.Context(), "go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, info)
	}
	if !strings.Contains(string(info), "CGO_ENABLED=0") {
		t.Errorf("the binary was not built with CGO_ENABLED=0:\n%s", info)
	}
	if strings.Contains(strings.ToLower(string(info)), "ferretdb") {
		t.Errorf("the production binary links FerretDB:\n%s", info)
	}
}
