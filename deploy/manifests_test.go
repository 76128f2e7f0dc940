package deploy

// Neither Docker nor Kubernetes runs where this repository is developed, so the
// Dockerfile, docker-compose.yml and the manifests under deploy/k8s are checked
// here by parsing them and comparing them with the code: the environment
// variables config.Config declares (read from its source: internal/config
// is internal to cmd/), the probe paths the metrics handler serves, the
// ldflags variables of cmd/scorerefresh, the rules parser, the exported
// metric names. Where kubectl or promtool is installed, they check too.
//
// Shared with the other tests of this package: repoRoot, readAsset,
// decodeYAML and the asset paths (alerts_test.go), loadDashboard and
// variableQuery (dashboard_test.go), exportedFamilies and isExported
// (metrics_test.go), promqlMetricNames (promql_test.go).

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// Paths of the assets checked here, relative to the repository root.
const (
	dockerfilePath   = "Dockerfile"
	dockerignorePath = ".dockerignore"
	composePath      = "docker-compose.yml"
	k8sBaseDir       = "deploy/k8s"
	k8sKEDADir       = "deploy/k8s/keda"
	k8sJobsDir       = "deploy/k8s/jobs"
	configSourcePath = "internal/config/config.go"
	mainSourcePath   = "cmd/scorerefresh/main.go"
	productionPkg    = "./cmd/scorerefresh"
)

// shutdownMargin is what a grace period must leave after SHUTDOWN_TIMEOUT:
// the final release of claims (one round trip), the metrics server's 3s
// shutdown and the disconnect. Killed sooner, claims wait out LEASE_DURATION.
const shutdownMargin = 10 * time.Second

// goRuntimeVars are the variables a manifest may set besides config.Config's:
// the Go runtime reads them, not the service.
var goRuntimeVars = map[string]bool{"GOMEMLIMIT": true, "GOMAXPROCS": true, "GOGC": true, "GODEBUG": true}

// ---- repository files --------------------------------------------------------

// repoFile is rel (slash-separated, relative to the repository root) as an
// absolute path.
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	return filepath.Join(repoRoot(t), filepath.FromSlash(rel))
}

// yamlDocuments decodes every document of a (possibly multi-document) YAML
// file into nodes.
func yamlDocuments(t *testing.T, rel string) []*yaml.Node {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(string(readAsset(t, rel))))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		if err := dec.Decode(&n); errors.Is(err, io.EOF) {
			return docs
		} else if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if len(n.Content) > 0 && n.Content[0].Kind != 0 {
			docs = append(docs, &n)
		}
	}
}

// ---- what the code says ------------------------------------------------------

// configVar is one environment variable of config.Config.
type configVar struct {
	Name    string
	Type    string // Go type: string, int, bool or time.Duration
	Default string // envDefault; "" when it has none
}

// configVars reads config.Config's env and envDefault tags from the source.
func configVars(t *testing.T) map[string]configVar {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), configSourcePath, readAsset(t, configSourcePath), parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]configVar{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Config" {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			t.Fatalf("%s: Config is not a struct", configSourcePath)
		}
		for _, field := range st.Fields.List {
			if field.Tag == nil {
				continue
			}
			raw, err := strconv.Unquote(field.Tag.Value)
			if err != nil {
				t.Fatal(err)
			}
			tag := reflect.StructTag(raw)
			name, _, _ := strings.Cut(tag.Get("env"), ",")
			if name == "" {
				continue
			}
			vars[name] = configVar{Name: name, Type: types.ExprString(field.Type), Default: tag.Get("envDefault")}
		}
		return false
	})
	if len(vars) == 0 {
		t.Fatalf("%s: no env tags found in type Config", configSourcePath)
	}
	return vars
}

// effective is the value a service sees for name: env's, or the default.
func effective(vars map[string]configVar, env map[string]string, name string) string {
	if v, ok := env[name]; ok {
		return v
	}
	return vars[name].Default
}

// metricsPort is the port of the effective METRICS_ADDR.
func metricsPort(t *testing.T, vars map[string]configVar, env map[string]string) int {
	t.Helper()
	addr := effective(vars, env, "METRICS_ADDR")
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("METRICS_ADDR=%q: %v", addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("METRICS_ADDR=%q: port is not a number", addr)
	}
	return n
}

func shutdownTimeout(t *testing.T, vars map[string]configVar, env map[string]string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(effective(vars, env, "SHUTDOWN_TIMEOUT"))
	if err != nil {
		t.Fatalf("SHUTDOWN_TIMEOUT: %v", err)
	}
	return d
}

// checkEnv reports variables the service does not know and literal values
// config.Parse would refuse. secrets are the variables set from elsewhere
// (a Secret); their names are checked, not their values.
func checkEnv(t *testing.T, where string, vars map[string]configVar, env map[string]string, secrets []string) {
	t.Helper()
	for _, name := range secrets {
		if _, ok := vars[name]; !ok {
			t.Errorf("%s: %s is not a variable of config.Config (%s)", where, name, configSourcePath)
		}
	}
	for name, value := range env {
		if goRuntimeVars[name] {
			if name == "GOMEMLIMIT" {
				if _, err := parseGoMemLimit(value); err != nil {
					t.Errorf("%s: GOMEMLIMIT=%q: %v", where, value, err)
				}
			}
			continue
		}
		v, ok := vars[name]
		if !ok {
			t.Errorf("%s: %s is not a variable of config.Config (%s) nor of the Go runtime", where, name, configSourcePath)
			continue
		}
		if err := checkConfigValue(v, value); err != nil {
			t.Errorf("%s: %s=%q: %v", where, name, value, err)
		}
	}
	c, errC := strconv.Atoi(effective(vars, env, "REFRESH_CONCURRENCY"))
	m, errM := strconv.Atoi(effective(vars, env, "MAX_USERS_IN_FLIGHT"))
	if errC == nil && errM == nil && c > m {
		t.Errorf("%s: REFRESH_CONCURRENCY=%d exceeds MAX_USERS_IN_FLIGHT=%d: the service refuses to start", where, c, m)
	}
}

// checkConfigValue applies the rules of config.Parse that a manifest can get
// wrong: every number and duration positive, booleans booleans, no empty
// names, a mongodb:// URI.
func checkConfigValue(v configVar, value string) error {
	switch v.Type {
	case "int":
		n, err := strconv.Atoi(value)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a positive whole number")
		}
	case "time.Duration":
		d, err := time.ParseDuration(value)
		if err != nil || d <= 0 {
			return fmt.Errorf("want a positive duration such as 30s")
		}
	case "bool":
		if _, err := strconv.ParseBool(value); err != nil {
			return fmt.Errorf("want true or false")
		}
	case "string":
		if strings.TrimSpace(value) == "" && v.Name != "SCORING_RULES" && v.Name != "METRICS_ADDR" {
			return fmt.Errorf("must not be empty")
		}
	}
	switch v.Name {
	case "MONGODB_URI":
		if !strings.HasPrefix(value, "mongodb://") && !strings.HasPrefix(value, "mongodb+srv://") {
			return fmt.Errorf("want mongodb:// or mongodb+srv://")
		}
	case "METRICS_ADDR":
		if _, _, err := net.SplitHostPort(value); err != nil {
			return err
		}
	}
	return nil
}

// checkRulesFile validates a rules file with the service's own parser.
func checkRulesFile(t *testing.T, where, source string, data []byte) {
	t.Helper()
	rules, err := scoring.ParseRules(source, data)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	if len(rules.Components) == 0 {
		t.Errorf("%s: %s has no components", where, source)
	}
}

// nowFunc turns a time function into the Now source metrics.NewHealth takes.
type nowFunc func() time.Time

func (f nowFunc) Now() time.Time { return f() }

// checkProbePaths serves metrics.Handler and checks that livePath and
// readyPath behave as Kubernetes needs: readiness fails while a condition
// (MongoDB, claiming) fails, liveness does not, and liveness fails only once a
// loop is stuck; metricsPath serves the registry.
func checkProbePaths(t *testing.T, livePath, readyPath, metricsPath string) {
	t.Helper()
	now := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	h := metrics.NewHealth(nowFunc(clock))
	h.Watch("claim loop", time.Minute)
	h.Set("mongodb", false, "ping failed")
	srv := httptest.NewServer(metrics.Handler(metrics.NewRegistry(), h))
	defer srv.Close()
	status := func(p string) int {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status(readyPath); got != http.StatusServiceUnavailable {
		t.Errorf("readiness probe %s answers %d while MongoDB is down, want 503", readyPath, got)
	}
	if got := status(livePath); got != http.StatusOK {
		t.Errorf("liveness probe %s answers %d while MongoDB is down, want 200 (a restart would not help)", livePath, got)
	}
	h.Set("mongodb", true, "")
	if got := status(readyPath); got != http.StatusOK {
		t.Errorf("readiness probe %s answers %d when all is well, want 200", readyPath, got)
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	if got := status(livePath); got != http.StatusServiceUnavailable {
		t.Errorf("liveness probe %s answers %d with a stuck loop, want 503", livePath, got)
	}
	if got := status(metricsPath); got != http.StatusOK {
		t.Errorf("metrics path %s answers %d, want 200", metricsPath, got)
	}
}

// ---- images ------------------------------------------------------------------

var (
	versionTagRE = regexp.MustCompile(`^v?\d+\.\d+\.\d+([-+._][0-9A-Za-z._-]+)?$`)
	digestRE     = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)
)

// imagePinned accepts a reference with a digest or a full version tag
// (1.2.3, v1.2.3, 1.2.3-suffix): never latest, a bare major or no tag.
func imagePinned(ref string) error {
	if digestRE.MatchString(ref) {
		return nil
	}
	name := ref[strings.LastIndex(ref, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	if !ok {
		return fmt.Errorf("image %q has no tag (means latest)", ref)
	}
	if !versionTagRE.MatchString(tag) {
		return fmt.Errorf("image %q: tag %q is not a full version (want e.g. 1.2.3 or v1.2.3, or a digest)", ref, tag)
	}
	return nil
}

func imageTag(ref string) string {
	name := ref[strings.LastIndex(ref, "/")+1:]
	_, tag, _ := strings.Cut(name, ":")
	tag, _, _ = strings.Cut(tag, "@")
	return tag
}

// leadingVersion parses the x.y.z at the start of a tag or go directive.
func leadingVersion(s string) ([3]int, bool) {
	m := regexp.MustCompile(`^v?(\d+)\.(\d+)(?:\.(\d+))?`).FindStringSubmatch(s)
	if m == nil {
		return [3]int{}, false
	}
	var v [3]int
	for i := range 3 {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	return v, true
}

// ---- the Dockerfile ----------------------------------------------------------

type dockerStage struct {
	From     string // image or earlier stage
	Name     string // AS name
	Platform string
	Lines    []dockerInstruction
}

type dockerInstruction struct {
	Cmd  string // upper case: RUN, COPY, USER, ...
	Args string
	Line int
}

// parseDockerfile splits a Dockerfile into stages of instructions, joining
// continuation lines and dropping comments. Heredocs are not supported.
func parseDockerfile(src string) ([]dockerStage, error) {
	var stages []dockerStage
	var cur strings.Builder
	start := 0
	flush := func() error {
		text := strings.TrimSpace(cur.String())
		cur.Reset()
		if text == "" {
			return nil
		}
		cmd, args, _ := strings.Cut(text, " ")
		in := dockerInstruction{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args), Line: start}
		if in.Cmd == "FROM" {
			st := dockerStage{}
			fields := strings.Fields(in.Args)
			for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
				if p, ok := strings.CutPrefix(fields[0], "--platform="); ok {
					st.Platform = p
				}
				fields = fields[1:]
			}
			switch {
			case len(fields) == 1:
			case len(fields) == 3 && strings.EqualFold(fields[1], "AS"):
				st.Name = fields[2]
			default:
				return fmt.Errorf("line %d: cannot read FROM %s", in.Line, in.Args)
			}
			st.From = fields[0]
			stages = append(stages, st)
			return nil
		}
		if len(stages) == 0 {
			if in.Cmd == "ARG" {
				return nil // global ARG before the first FROM
			}
			return fmt.Errorf("line %d: %s before FROM", in.Line, in.Cmd)
		}
		if strings.Contains(in.Args, "<<") && (in.Cmd == "RUN" || in.Cmd == "COPY") {
			return fmt.Errorf("line %d: heredocs are not supported by this test's parser", in.Line)
		}
		stages[len(stages)-1].Lines = append(stages[len(stages)-1].Lines, in)
		return nil
	}
	for i, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue // comments, also between continuation lines
		}
		if cur.Len() == 0 {
			if trimmed == "" {
				continue
			}
			start = i + 1
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		if err := flush(); err != nil {
			return nil, err
		}
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("line %d: continuation at the end of the file", start)
	}
	return stages, nil
}

func loadDockerfile(t *testing.T) []dockerStage {
	t.Helper()
	stages, err := parseDockerfile(string(readAsset(t, dockerfilePath)))
	if err != nil {
		t.Fatalf("%s: %v", dockerfilePath, err)
	}
	if len(stages) < 2 {
		t.Fatalf("%s: %d stages, want a multi-stage build (build, then a minimal runtime)", dockerfilePath, len(stages))
	}
	return stages
}

// shellWords splits a shell command line into words, honouring quotes and
// backslashes; the operators && || ; | are words of their own. Variables are
// left unexpanded.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	end := func() {
		if inWord {
			words = append(words, w.String())
			w.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			end()
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", s)
			}
			w.WriteString(s[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '"':
			inWord = true
			for i++; ; i++ {
				if i >= len(s) {
					return nil, fmt.Errorf("unterminated \" in %q", s)
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`+"`", s[i+1]) >= 0 {
					i++
				} else if s[i] == '"' {
					break
				}
				w.WriteByte(s[i])
			}
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			inWord = true
		case c == '&' || c == '|' || c == ';':
			end()
			op := string(c)
			if i+1 < len(s) && (s[i+1] == '&' || s[i+1] == '|') && c != ';' {
				op += string(s[i+1])
				i++
			}
			words = append(words, op)
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	end()
	return words, nil
}

// goBuild is the `go build` command of the Dockerfile's build stage.
type goBuild struct {
	Stage    dockerStage
	Preamble []string          // NAME=value statements run before it (NAME=... && go build)
	Env      map[string]string // assignments before `go` and ENV of the stage
	Args     []string          // after `go build`
	Ldflags  string
	Output   string
	Pkgs     []string
}

func findGoBuild(t *testing.T, stages []dockerStage) goBuild {
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
			words, err := shellWords(in.Args)
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
func dockerfileUser(t *testing.T, stages []dockerStage) (uid, gid int64) {
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

// execForm parses a JSON-array ENTRYPOINT or CMD.
func execForm(in dockerInstruction) ([]string, error) {
	var argv []string
	if err := json.Unmarshal([]byte(in.Args), &argv); err != nil {
		return nil, fmt.Errorf("line %d: %s %s: want the exec form [\"...\"] (no shell in the image; signals reach the process)", in.Line, in.Cmd, in.Args)
	}
	return argv, nil
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
	words, err := shellWords(ldflags)
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
				if err := imagePinned(st.From); err != nil {
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
				want, _ = leadingVersion(v)
			}
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "toolchain go"); ok {
				want, _ = leadingVersion(v)
			}
		}
		b := findGoBuild(t, stages)
		if !strings.HasPrefix(b.Stage.From, "golang:") {
			t.Fatalf("%s: the build stage is FROM %s, want the official golang image", dockerfilePath, b.Stage.From)
		}
		got, ok := leadingVersion(imageTag(b.Stage.From))
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
				argv, err := execForm(in)
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

// ---- .dockerignore -----------------------------------------------------------

type ignorePattern struct {
	re     *regexp.Regexp
	negate bool
}

// parseDockerignore compiles .dockerignore patterns: Go's filepath.Match
// syntax plus **, matching a path or any of its parents, the last matching
// pattern deciding (! re-includes).
func parseDockerignore(src string) []ignorePattern {
	var ps []ignorePattern
	for _, line := range strings.Split(src, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p := ignorePattern{}
		if rest, ok := strings.CutPrefix(line, "!"); ok {
			p.negate, line = true, strings.TrimSpace(rest)
		}
		line = strings.Trim(path.Clean(line), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch c := line[i]; {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case c == '*':
				re.WriteString("[^/]*")
			case c == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		re.WriteString("(/.*)?$")
		p.re = regexp.MustCompile(re.String())
		ps = append(ps, p)
	}
	return ps
}

func dockerIgnored(ps []ignorePattern, rel string) bool {
	ignored := false
	for _, p := range ps {
		if p.re.MatchString(rel) {
			ignored = !p.negate
		}
	}
	return ignored
}

func TestManifestDockerignore(t *testing.T) {
	t.Parallel()
	ps := parseDockerignore(string(readAsset(t, dockerignorePath)))
	if !dockerIgnored(ps, ".git/HEAD") {
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
		if dockerIgnored(ps, f) {
			t.Errorf("%s excludes %s, which %s compiles from", dockerignorePath, f, productionPkg)
		}
	}
}

// ---- docker-compose.yml ------------------------------------------------------

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image           string                       `yaml:"image"`
	Build           any                          `yaml:"build"`
	PullPolicy      string                       `yaml:"pull_policy"`
	Command         []string                     `yaml:"command"`
	Entrypoint      []string                     `yaml:"entrypoint"`
	Environment     map[string]string            `yaml:"environment"`
	Volumes         []string                     `yaml:"volumes"`
	Ports           []string                     `yaml:"ports"`
	DependsOn       map[string]composeDependency `yaml:"depends_on"`
	Healthcheck     *composeHealthcheck          `yaml:"healthcheck"`
	StopGracePeriod string                       `yaml:"stop_grace_period"`
	ReadOnly        bool                         `yaml:"read_only"`
}

type composeDependency struct {
	Condition string `yaml:"condition"`
}

type composeHealthcheck struct {
	Test []string `yaml:"test"`
}

// composeMount is one short-syntax volume: a bind mount of a repository path
// (Source relative to the root) or a named volume.
type composeMount struct {
	Source, Target string
	Bind, ReadOnly bool
}

func (s composeService) mounts(t *testing.T) []composeMount {
	t.Helper()
	var ms []composeMount
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			t.Fatalf("%s: volume %q: want SOURCE:TARGET[:ro]", composePath, v)
		}
		m := composeMount{Source: parts[0], Target: parts[1], ReadOnly: len(parts) > 2 && parts[2] == "ro"}
		if strings.HasPrefix(m.Source, ".") || strings.HasPrefix(m.Source, "/") {
			m.Bind = true
			m.Source = path.Clean(m.Source)
		}
		ms = append(ms, m)
	}
	return ms
}

// hostPath maps a path inside the container to the repository path mounted
// there, "" when none is.
func (s composeService) hostPath(t *testing.T, inContainer string) string {
	t.Helper()
	inContainer = path.Clean(inContainer)
	for _, m := range s.mounts(t) {
		if !m.Bind {
			continue
		}
		if inContainer == m.Target {
			return m.Source
		}
		if rest, ok := strings.CutPrefix(inContainer, m.Target+"/"); ok {
			return path.Join(m.Source, rest)
		}
	}
	return ""
}

// publishedPort finds the ports entry for containerPort.
func (s composeService) publishedPort(containerPort int) (string, bool) {
	for _, p := range s.Ports {
		parts := strings.Split(p, ":")
		if parts[len(parts)-1] == strconv.Itoa(containerPort) {
			return p, true
		}
	}
	return "", false
}

func (s composeService) isBuilt() bool { return s.Build != nil }

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	decodeYAML(t, composePath, &c)
	if len(c.Services) == 0 {
		t.Fatalf("%s: no services", composePath)
	}
	return c
}

// composeRoles finds the services by what they run.
type composeRoles struct {
	consumer, mongo, prometheus, grafana string
	scorerefresh                         []string // every service running the built image
}

func findComposeRoles(t *testing.T, c composeFile) composeRoles {
	t.Helper()
	var r composeRoles
	built := map[string]bool{}
	for _, s := range c.Services {
		if s.isBuilt() && s.Image != "" {
			built[s.Image] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Services)) {
		s := c.Services[name]
		repo, _, _ := strings.Cut(s.Image, ":")
		switch {
		case s.isBuilt() || built[s.Image]:
			r.scorerefresh = append(r.scorerefresh, name)
			if slices.Equal(s.Command, []string{"run"}) {
				r.consumer = name
			}
		case repo == "mongo":
			r.mongo = name
		case repo == "prom/prometheus":
			r.prometheus = name
		case repo == "grafana/grafana":
			r.grafana = name
		}
	}
	if r.consumer == "" || r.mongo == "" || r.prometheus == "" || r.grafana == "" {
		t.Fatalf("%s: want a scorerefresh service built here running [run], mongo, prom/prometheus and grafana/grafana; found %+v", composePath, r)
	}
	return r
}

var (
	rsIDRE   = regexp.MustCompile(`rs\.initiate\(\s*\{\s*_id:\s*"([^"]+)"`)
	rsHostRE = regexp.MustCompile(`host:\s*"([^"]+)"`)
)

func TestManifestCompose(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	vars := configVars(t)
	roles := findComposeRoles(t, c)
	consumer := c.Services[roles.consumer]
	metricsPortN := metricsPort(t, vars, consumer.Environment)

	t.Run("images pinned", func(t *testing.T) {
		t.Parallel()
		for _, name := range slices.Sorted(maps.Keys(c.Services)) {
			s := c.Services[name]
			switch {
			case s.isBuilt():
				if s.Image == "" || strings.HasSuffix(s.Image, ":latest") || !strings.Contains(s.Image, ":") {
					t.Errorf("%s: service %s builds image %q: give it a tag other services can name", composePath, name, s.Image)
				}
			case slices.Contains(roles.scorerefresh, name):
				if s.PullPolicy != "never" {
					t.Errorf("%s: service %s runs the locally built %s: set pull_policy: never, there is nothing to pull", composePath, name, s.Image)
				}
			default:
				if err := imagePinned(s.Image); err != nil {
					t.Errorf("%s: service %s: %v", composePath, name, err)
				}
			}
		}
	})

	t.Run("scorerefresh environment", func(t *testing.T) {
		t.Parallel()
		for _, name := range roles.scorerefresh {
			s := c.Services[name]
			checkEnv(t, composePath+": service "+name, vars, s.Environment, nil)
			if !s.ReadOnly {
				t.Errorf("%s: service %s: set read_only: true, as the Kubernetes manifests do", composePath, name)
			}
			if len(s.Entrypoint) > 0 {
				t.Errorf("%s: service %s overrides the entrypoint: give the subcommand as command", composePath, name)
			}
			if rules, ok := s.Environment["SCORING_RULES"]; ok {
				host := s.hostPath(t, rules)
				if host == "" {
					t.Errorf("%s: service %s: SCORING_RULES=%s is not mounted from the repository", composePath, name, rules)
					continue
				}
				checkRulesFile(t, composePath+": service "+name, host, readAsset(t, host))
			}
		}
	})

	t.Run("consumer", func(t *testing.T) {
		t.Parallel()
		if d := consumer.DependsOn[roles.mongo]; d.Condition != "service_healthy" {
			t.Errorf("%s: %s depends on %s with condition %q, want service_healthy (the replica set initiated)", composePath, roles.consumer, roles.mongo, d.Condition)
		}
		grace, err := time.ParseDuration(consumer.StopGracePeriod)
		if err != nil {
			t.Errorf("%s: %s: stop_grace_period %q: %v (compose's default of 10s cuts the shutdown short)", composePath, roles.consumer, consumer.StopGracePeriod, err)
		} else if want := shutdownTimeout(t, vars, consumer.Environment) + shutdownMargin; grace < want {
			t.Errorf("%s: %s: stop_grace_period %s, want at least SHUTDOWN_TIMEOUT + %s = %s", composePath, roles.consumer, grace, shutdownMargin, want)
		}
		if _, ok := consumer.publishedPort(metricsPortN); !ok {
			t.Errorf("%s: %s publishes no port for METRICS_ADDR's %d (ports %q)", composePath, roles.consumer, metricsPortN, consumer.Ports)
		}
	})

	t.Run("mongo replica set", func(t *testing.T) {
		t.Parallel()
		mongo := c.Services[roles.mongo]
		if v, ok := leadingVersion(imageTag(mongo.Image)); !ok || v[0] < 6 {
			t.Errorf("%s: %s, want MongoDB 6.0 or later (docs/contract.md)", composePath, mongo.Image)
		}
		setName := ""
		for i, a := range mongo.Command {
			if a == "--replSet" && i+1 < len(mongo.Command) {
				setName = mongo.Command[i+1]
			}
		}
		if setName == "" {
			t.Fatalf("%s: %s runs without --replSet: no change streams", composePath, roles.mongo)
		}
		if mongo.Healthcheck == nil {
			t.Fatalf("%s: %s has no healthcheck, so nothing waits for the replica set", composePath, roles.mongo)
		}
		var script string
		for _, a := range mongo.Healthcheck.Test {
			if host := mongo.hostPath(t, a); host != "" {
				script = string(readAsset(t, host))
			}
		}
		if script == "" {
			t.Fatalf("%s: %s's healthcheck %q runs no script mounted from the repository", composePath, roles.mongo, mongo.Healthcheck.Test)
		}
		id, host := rsIDRE.FindStringSubmatch(script), rsHostRE.FindStringSubmatch(script)
		if id == nil || host == nil {
			t.Fatalf("%s: %s's healthcheck script initiates no replica set with a member host", composePath, roles.mongo)
		}
		if id[1] != setName {
			t.Errorf("the healthcheck script initiates replica set %q, mongod runs --replSet %s", id[1], setName)
		}
		if h, _, _ := strings.Cut(host[1], ":"); h != roles.mongo {
			t.Errorf("the replica set member is %s, want the compose service name %s (what the other containers resolve)", host[1], roles.mongo)
		}
		for _, name := range roles.scorerefresh {
			uri, ok := c.Services[name].Environment["MONGODB_URI"]
			if !ok {
				continue
			}
			u, err := url.Parse(uri)
			if err != nil {
				t.Errorf("%s: %s: MONGODB_URI: %v", composePath, name, err)
				continue
			}
			if u.Host != host[1] {
				t.Errorf("%s: %s: MONGODB_URI names %s, the replica set member is %s", composePath, name, u.Host, host[1])
			}
			if rs := u.Query().Get("replicaSet"); rs != setName {
				t.Errorf("%s: %s: MONGODB_URI has replicaSet=%q, want %s", composePath, name, rs, setName)
			}
		}
		for _, name := range roles.scorerefresh {
			s := c.Services[name]
			if _, usesMongo := s.Environment["MONGODB_URI"]; usesMongo && s.DependsOn[roles.mongo].Condition != "service_healthy" {
				t.Errorf("%s: %s uses MongoDB without depending on %s being healthy", composePath, name, roles.mongo)
			}
		}
	})

	t.Run("prometheus", func(t *testing.T) {
		t.Parallel()
		checkComposePrometheus(t, c, roles, metricsPortN)
	})

	t.Run("grafana", func(t *testing.T) {
		t.Parallel()
		checkComposeGrafana(t, c, roles)
	})

	t.Run("mounts and ports", func(t *testing.T) {
		t.Parallel()
		for _, name := range slices.Sorted(maps.Keys(c.Services)) {
			s := c.Services[name]
			for _, p := range s.Ports {
				if !strings.HasPrefix(p, "127.0.0.1:") {
					t.Errorf("%s: %s publishes %q on every interface; MongoDB here has no authentication: bind 127.0.0.1", composePath, name, p)
				}
			}
			for _, m := range s.mounts(t) {
				switch {
				case m.Bind && !m.ReadOnly:
					t.Errorf("%s: %s mounts %s writable: the repository's files are configuration, mount them :ro", composePath, name, m.Source)
				case m.Bind:
					if _, err := os.Stat(repoFile(t, m.Source)); err != nil {
						t.Errorf("%s: %s mounts %s: %v", composePath, name, m.Source, err)
					}
				default:
					if _, ok := c.Volumes[m.Source]; !ok {
						t.Errorf("%s: %s mounts volume %s, which is not declared under volumes", composePath, name, m.Source)
					}
				}
			}
		}
	})
}

type prometheusConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string          `yaml:"targets"`
			Labels  map[string]string `yaml:"labels"`
		} `yaml:"static_configs"`
		DNSSDConfigs []struct {
			Names []string `yaml:"names"`
			Port  int      `yaml:"port"`
		} `yaml:"dns_sd_configs"`
		RelabelConfigs []struct {
			TargetLabel string `yaml:"target_label"`
		} `yaml:"relabel_configs"`
	} `yaml:"scrape_configs"`
}

func checkComposePrometheus(t *testing.T, c composeFile, roles composeRoles, metricsPortN int) {
	t.Helper()
	prom := c.Services[roles.prometheus]
	configIn := ""
	for _, a := range prom.Command {
		if v, ok := strings.CutPrefix(a, "--config.file="); ok {
			configIn = v
		}
	}
	if configIn == "" {
		t.Fatalf("%s: %s: no --config.file in command %q", composePath, roles.prometheus, prom.Command)
	}
	configHost := prom.hostPath(t, configIn)
	if configHost == "" {
		t.Fatalf("%s: %s: %s is not mounted from the repository", composePath, roles.prometheus, configIn)
	}
	var cfg prometheusConfig
	decodeYAML(t, configHost, &cfg)

	// The rules: deploy/prometheus/alerts.yml, found at the same relative
	// path inside the container and in the repository.
	loaded := false
	for _, rf := range cfg.RuleFiles {
		inContainer := path.Join(path.Dir(configIn), rf)
		mounted := prom.hostPath(t, inContainer)
		inRepo := path.Clean(path.Join(path.Dir(configHost), rf))
		if mounted == "" {
			t.Errorf("%s: rule file %s resolves to %s in the container, where nothing is mounted", configHost, rf, inContainer)
		} else if mounted != inRepo {
			t.Errorf("%s: rule file %s is %s in the container but %s in the repository: promtool would check another file", configHost, rf, mounted, inRepo)
		}
		loaded = loaded || mounted == alertsPath
	}
	if !loaded {
		t.Errorf("%s: Prometheus does not load %s", configHost, alertsPath)
	}

	// The scrape: every replica of the consumer on METRICS_ADDR's port,
	// labelled the way the dashboard and the alerts select.
	var job string
	for _, sc := range cfg.ScrapeConfigs {
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			continue
		}
		labels := map[string]bool{}
		for _, rc := range sc.RelabelConfigs {
			labels[rc.TargetLabel] = true
		}
		hit := false
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				if target == net.JoinHostPort(roles.consumer, strconv.Itoa(metricsPortN)) {
					hit = true
					for l := range st.Labels {
						labels[l] = true
					}
				}
			}
		}
		for _, dns := range sc.DNSSDConfigs {
			if slices.Contains(dns.Names, roles.consumer) && dns.Port == metricsPortN {
				hit = true
			}
		}
		if !hit {
			continue
		}
		job = sc.JobName
		for _, l := range dashboardTargetLabels(t) {
			if !labels[l] {
				t.Errorf("%s: job %s attaches no %q label, which the dashboard's variables select on", configHost, sc.JobName, l)
			}
		}
	}
	if job == "" {
		t.Fatalf("%s: no scrape config reaches %s:%d/metrics", configHost, roles.consumer, metricsPortN)
	}
	if re := absentJobRegexp(t); re != nil && !re.MatchString(job) {
		t.Errorf("%s: job %q does not match the job the alerts expect (%s)", configHost, job, re)
	}
}

type grafanaDatasources struct {
	Datasources []struct {
		Name string `yaml:"name"`
		Type string `yaml:"type"`
		URL  string `yaml:"url"`
	} `yaml:"datasources"`
}

type grafanaDashboardProviders struct {
	Providers []struct {
		Type    string `yaml:"type"`
		Options struct {
			Path string `yaml:"path"`
		} `yaml:"options"`
	} `yaml:"providers"`
}

// grafanaProvisioning reads the files of a provisioning directory mounted
// into the Grafana container.
func grafanaProvisioning(t *testing.T, s composeService, dir string, v func() any) []any {
	t.Helper()
	host := s.hostPath(t, dir)
	if host == "" {
		t.Fatalf("%s: nothing mounted at %s in the Grafana container", composePath, dir)
	}
	entries, err := os.ReadDir(repoFile(t, host))
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	for _, e := range entries {
		if ext := path.Ext(e.Name()); ext == ".yml" || ext == ".yaml" {
			x := v()
			decodeYAML(t, path.Join(host, e.Name()), x)
			out = append(out, x)
		}
	}
	return out
}

func checkComposeGrafana(t *testing.T, c composeFile, roles composeRoles) {
	t.Helper()
	g := c.Services[roles.grafana]
	promURL := "http://" + net.JoinHostPort(roles.prometheus, "9090")
	dsTypes := map[string]bool{}
	for _, x := range grafanaProvisioning(t, g, "/etc/grafana/provisioning/datasources", func() any { return &grafanaDatasources{} }) {
		for _, ds := range x.(*grafanaDatasources).Datasources {
			dsTypes[ds.Type] = true
			if ds.Type == "prometheus" && strings.TrimSuffix(ds.URL, "/") != promURL {
				t.Errorf("datasource %s points at %s, want the compose Prometheus %s", ds.Name, ds.URL, promURL)
			}
		}
	}
	if !dsTypes["prometheus"] {
		t.Errorf("%s: no Prometheus datasource is provisioned", composePath)
	}
	for _, want := range dashboardDatasourceTypes(t) {
		if !dsTypes[want] {
			t.Errorf("the dashboard wants a %s datasource; none is provisioned", want)
		}
	}
	found := false
	for _, x := range grafanaProvisioning(t, g, "/etc/grafana/provisioning/dashboards", func() any { return &grafanaDashboardProviders{} }) {
		for _, p := range x.(*grafanaDashboardProviders).Providers {
			host := g.hostPath(t, path.Join(p.Options.Path, path.Base(dashboardPath)))
			found = found || (p.Type == "file" && host == dashboardPath)
		}
	}
	if !found {
		t.Errorf("%s: no dashboard provider serves %s (mount it into a provider's path)", composePath, dashboardPath)
	}
}

// ---- the dashboard and the alerts (read only) -------------------------------

var labelValuesRE = regexp.MustCompile(`label_values\(\s*(?:[^,()]*(?:\{[^}]*\})?\s*,\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\s*\)`)

// dashboardTargetLabels are the labels the dashboard's variables read with
// label_values() that Prometheus does not attach by itself (job, instance):
// the scrape configuration must.
func dashboardTargetLabels(t *testing.T) []string {
	t.Helper()
	var labels []string
	for _, v := range loadDashboard(t).Templating.List {
		for _, m := range labelValuesRE.FindAllStringSubmatch(variableQuery(v.Query), -1) {
			if l := m[1]; l != "job" && l != "instance" && !slices.Contains(labels, l) {
				labels = append(labels, l)
			}
		}
	}
	slices.Sort(labels)
	return labels
}

// dashboardDatasourceTypes are the plugin types of the dashboard's datasource
// variables.
func dashboardDatasourceTypes(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, v := range loadDashboard(t).Templating.List {
		if q := variableQuery(v.Query); q != "" && v.Type == "datasource" {
			out = append(out, q)
		}
	}
	return out
}

var absentJobRE = regexp.MustCompile(`up\{job=~"([^"]+)"`)

// absentJobRegexp is the job matcher of the alerts' absent(up{job=~...})
// rule, nil if there is none.
func absentJobRegexp(t *testing.T) *regexp.Regexp {
	t.Helper()
	m := absentJobRE.FindStringSubmatch(string(readAsset(t, alertsPath)))
	if m == nil {
		return nil
	}
	return regexp.MustCompile("^(?:" + m[1] + ")$")
}

// ---- Kubernetes --------------------------------------------------------------

type k8sMeta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type k8sObject struct {
	APIVersion string  `yaml:"apiVersion"`
	Kind       string  `yaml:"kind"`
	Metadata   k8sMeta `yaml:"metadata"`
	File       string  `yaml:"-"`
	node       *yaml.Node
}

func (o k8sObject) String() string { return o.File + ": " + o.Kind + " " + o.Metadata.Name }

func (o k8sObject) decode(t *testing.T, v any) {
	t.Helper()
	if err := o.node.Decode(v); err != nil {
		t.Fatalf("%s: %v", o, err)
	}
}

type labelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

// selects reports whether the selector picks an object with labels.
func (s labelSelector) selects(labels map[string]string) bool {
	if len(s.MatchLabels) == 0 {
		return false
	}
	for k, v := range s.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

type podTemplate struct {
	Metadata k8sMeta `yaml:"metadata"`
	Spec     podSpec `yaml:"spec"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int64             `yaml:"terminationGracePeriodSeconds"`
	AutomountServiceAccountToken  *bool              `yaml:"automountServiceAccountToken"`
	RestartPolicy                 string             `yaml:"restartPolicy"`
	SecurityContext               k8sSecurityContext `yaml:"securityContext"`
	Containers                    []k8sContainer     `yaml:"containers"`
	Volumes                       []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name  string `yaml:"name"`
			Items []struct {
				Key  string `yaml:"key"`
				Path string `yaml:"path"`
			} `yaml:"items"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

type k8sSecurityContext struct {
	RunAsNonRoot             *bool  `yaml:"runAsNonRoot"`
	RunAsUser                *int64 `yaml:"runAsUser"`
	RunAsGroup               *int64 `yaml:"runAsGroup"`
	AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
	ReadOnlyRootFilesystem   *bool  `yaml:"readOnlyRootFilesystem"`
	Privileged               *bool  `yaml:"privileged"`
	Capabilities             struct {
		Drop []string `yaml:"drop"`
	} `yaml:"capabilities"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	EnvFrom   []any `yaml:"envFrom"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	ReadinessProbe  *k8sProbe          `yaml:"readinessProbe"`
	LivenessProbe   *k8sProbe          `yaml:"livenessProbe"`
	StartupProbe    *k8sProbe          `yaml:"startupProbe"`
	SecurityContext k8sSecurityContext `yaml:"securityContext"`
	VolumeMounts    []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
	PeriodSeconds    int `yaml:"periodSeconds"`
	TimeoutSeconds   int `yaml:"timeoutSeconds"`
	FailureThreshold int `yaml:"failureThreshold"`
}

// env returns the container's literal values and the names set from Secrets.
func (c k8sContainer) env(t *testing.T, where string) (literal map[string]string, fromSecret map[string]string) {
	t.Helper()
	literal, fromSecret = map[string]string{}, map[string]string{}
	seen := map[string]bool{}
	for _, e := range c.Env {
		if seen[e.Name] {
			t.Errorf("%s: %s is set twice", where, e.Name)
		}
		seen[e.Name] = true
		switch {
		case e.ValueFrom == nil:
			literal[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			fromSecret[e.Name] = e.ValueFrom.SecretKeyRef.Name
		default:
			t.Errorf("%s: %s comes from neither a value nor a Secret", where, e.Name)
		}
	}
	return literal, fromSecret
}

// k8sBundle is what a kustomization directory produces, read without
// kustomize: its objects, the ConfigMaps its generators make (name -> key ->
// content) and the patches of a component.
type k8sBundle struct {
	Kind       string // Kustomization or Component
	Objects    []k8sObject
	ConfigMaps map[string]map[string][]byte
	Resources  []string
	Patches    []kustomizePatch
}

type kustomization struct {
	Kind               string   `yaml:"kind"`
	Resources          []string `yaml:"resources"`
	Components         []string `yaml:"components"`
	ConfigMapGenerator []struct {
		Name  string   `yaml:"name"`
		Files []string `yaml:"files"`
	} `yaml:"configMapGenerator"`
	Images []struct {
		Name    string `yaml:"name"`
		NewName string `yaml:"newName"`
		NewTag  string `yaml:"newTag"`
		Digest  string `yaml:"digest"`
	} `yaml:"images"`
	Patches []kustomizePatch `yaml:"patches"`
}

type kustomizePatch struct {
	Path   string `yaml:"path"`
	Patch  string `yaml:"patch"`
	Target struct {
		Kind string `yaml:"kind"`
		Name string `yaml:"name"`
	} `yaml:"target"`
}

func loadKustomization(t *testing.T, dir string) k8sBundle {
	t.Helper()
	var k kustomization
	decodeYAML(t, path.Join(dir, "kustomization.yaml"), &k)
	b := k8sBundle{Kind: k.Kind, ConfigMaps: map[string]map[string][]byte{}, Resources: k.Resources, Patches: k.Patches}
	for _, img := range k.Images {
		if img.Digest == "" && (img.NewTag == "" || img.NewTag == "latest") {
			t.Errorf("%s/kustomization.yaml: images: %s is not pinned", dir, img.Name)
		}
	}
	if len(k.Components) > 0 {
		t.Errorf("%s/kustomization.yaml: components in a base: keep optional parts optional", dir)
	}
	for _, r := range k.Resources {
		rel := path.Join(dir, r)
		info, err := os.Stat(repoFile(t, rel))
		if err != nil {
			t.Fatalf("%s/kustomization.yaml: resource %s: %v", dir, r, err)
		}
		if info.IsDir() {
			sub := loadKustomization(t, rel)
			b.Objects = append(b.Objects, sub.Objects...)
			for name, data := range sub.ConfigMaps {
				b.ConfigMaps[name] = data
			}
			continue
		}
		for _, doc := range yamlDocuments(t, rel) {
			o := k8sObject{File: rel, node: doc}
			o.decode(t, &o)
			o.File, o.node = rel, doc
			if o.Kind == "" || o.Metadata.Name == "" {
				t.Errorf("%s: a document without kind or metadata.name", rel)
			}
			b.Objects = append(b.Objects, o)
		}
	}
	for _, g := range k.ConfigMapGenerator {
		data := map[string][]byte{}
		for _, f := range g.Files {
			key, file, ok := strings.Cut(f, "=")
			if !ok {
				key, file = path.Base(f), f
			}
			data[key] = readAsset(t, path.Join(dir, file))
		}
		b.ConfigMaps[g.Name] = data
	}
	return b
}

func (b k8sBundle) find(kind string) []k8sObject {
	var out []k8sObject
	for _, o := range b.Objects {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

func (b k8sBundle) one(t *testing.T, kind string) k8sObject {
	t.Helper()
	objs := b.find(kind)
	if len(objs) != 1 {
		t.Fatalf("%d objects of kind %s, want 1", len(objs), kind)
	}
	return objs[0]
}

type deploymentSpec struct {
	Replicas *int          `yaml:"replicas"`
	Selector labelSelector `yaml:"selector"`
	Template podTemplate   `yaml:"template"`
}

type k8sDeployment struct {
	Spec deploymentSpec `yaml:"spec"`
}

type k8sJob struct {
	Spec struct {
		BackoffLimit *int        `yaml:"backoffLimit"`
		Template     podTemplate `yaml:"template"`
	} `yaml:"spec"`
}

type k8sService struct {
	Spec struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort any    `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type k8sServiceMonitor struct {
	Spec struct {
		Selector  labelSelector `yaml:"selector"`
		Endpoints []struct {
			Port string `yaml:"port"`
			Path string `yaml:"path"`
		} `yaml:"endpoints"`
	} `yaml:"spec"`
}

type k8sPDB struct {
	Spec struct {
		MinAvailable   any           `yaml:"minAvailable"`
		MaxUnavailable any           `yaml:"maxUnavailable"`
		Selector       labelSelector `yaml:"selector"`
	} `yaml:"spec"`
}

type k8sScaledObject struct {
	Spec struct {
		ScaleTargetRef struct {
			Kind string `yaml:"kind"`
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MinReplicaCount *int `yaml:"minReplicaCount"`
		MaxReplicaCount *int `yaml:"maxReplicaCount"`
		Fallback        *struct {
			Replicas int `yaml:"replicas"`
		} `yaml:"fallback"`
		Triggers []struct {
			Type     string            `yaml:"type"`
			Metadata map[string]string `yaml:"metadata"`
		} `yaml:"triggers"`
	} `yaml:"spec"`
}

// portMatches reports whether a probe or Service port (a name or a number)
// designates the container port named name numbered number.
func portMatches(port any, name string, number int) bool {
	switch p := port.(type) {
	case string:
		return p == name || p == strconv.Itoa(number)
	case int:
		return p == number
	}
	return false
}

// parseQuantity reads a Kubernetes quantity (100m, 1, 512Mi, 1G).
func parseQuantity(s string) (float64, error) {
	suffixes := []struct {
		s string
		m float64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"m", 1e-3}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}
	for _, suf := range suffixes {
		if n, ok := strings.CutSuffix(s, suf.s); ok {
			v, err := strconv.ParseFloat(n, 64)
			return v * suf.m, err
		}
	}
	return strconv.ParseFloat(s, 64)
}

// parseGoMemLimit reads GOMEMLIMIT's syntax: bytes with an optional B, KiB,
// MiB, GiB or TiB suffix.
func parseGoMemLimit(s string) (float64, error) {
	for _, suf := range []struct {
		s string
		m float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if n, ok := strings.CutSuffix(s, suf.s); ok {
			v, err := strconv.ParseUint(n, 10, 64)
			return float64(v) * suf.m, err
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err == nil && v < 1<<20 {
		return 0, fmt.Errorf("%d bytes: a unit is missing (GOMEMLIMIT takes B, KiB, MiB, GiB)", v)
	}
	return float64(v), err
}

// checkPod checks what every scorerefresh pod needs: the image, the security
// context, resources, the environment, the rules and the grace period.
// It returns the container running scorerefresh.
func checkPod(t *testing.T, where string, pod podSpec, configMaps map[string]map[string][]byte, vars map[string]configVar, uid int64) k8sContainer {
	t.Helper()
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", where, len(pod.Containers))
	}
	c := pod.Containers[0]
	where += " container " + c.Name
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("%s: set automountServiceAccountToken: false (the service never calls the Kubernetes API)", where)
	}
	if err := imagePinned(c.Image); err != nil {
		t.Errorf("%s: %v", where, err)
	}
	if len(c.Command) > 0 {
		t.Errorf("%s: command %q overrides the image's entrypoint: give the subcommand as args", where, c.Command)
	}

	sc, psc := c.SecurityContext, pod.SecurityContext
	isTrue := func(b *bool) bool { return b != nil && *b }
	isFalse := func(b *bool) bool { return b != nil && !*b }
	if !isTrue(sc.RunAsNonRoot) && !isTrue(psc.RunAsNonRoot) {
		t.Errorf("%s: runAsNonRoot is not true", where)
	}
	runAs := firstSet(sc.RunAsUser, psc.RunAsUser)
	if runAs == nil || *runAs != uid {
		t.Errorf("%s: runAsUser is %v, want the image's USER %d", where, ptrString(runAs), uid)
	}
	if !isFalse(sc.AllowPrivilegeEscalation) {
		t.Errorf("%s: allowPrivilegeEscalation is not false", where)
	}
	if !isTrue(sc.ReadOnlyRootFilesystem) {
		t.Errorf("%s: readOnlyRootFilesystem is not true", where)
	}
	if isTrue(sc.Privileged) {
		t.Errorf("%s: privileged", where)
	}
	if !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: capabilities do not drop ALL", where)
	}

	for _, r := range []string{"cpu", "memory"} {
		req, errReq := parseQuantity(c.Resources.Requests[r])
		lim, errLim := parseQuantity(c.Resources.Limits[r])
		switch {
		case errReq != nil || c.Resources.Requests[r] == "":
			t.Errorf("%s: no valid %s request", where, r)
		case errLim != nil || c.Resources.Limits[r] == "":
			t.Errorf("%s: no valid %s limit", where, r)
		case req > lim:
			t.Errorf("%s: %s request %s above the limit %s", where, r, c.Resources.Requests[r], c.Resources.Limits[r])
		}
	}

	env, secrets := c.env(t, where)
	if len(c.EnvFrom) > 0 {
		t.Errorf("%s: envFrom hides which variables are set: list them under env", where)
	}
	checkEnv(t, where, vars, env, slices.Sorted(maps.Keys(secrets)))
	if _, literal := env["MONGODB_URI"]; literal {
		t.Errorf("%s: MONGODB_URI is a literal value; it carries a password: take it from a Secret", where)
	} else if secrets["MONGODB_URI"] == "" {
		t.Errorf("%s: MONGODB_URI is not set from a Secret (the default is localhost)", where)
	}
	if v, ok := env["GOMEMLIMIT"]; ok {
		soft, err1 := parseGoMemLimit(v)
		hard, err2 := parseQuantity(c.Resources.Limits["memory"])
		if err1 == nil && err2 == nil && (soft >= hard || soft < hard/2) {
			t.Errorf("%s: GOMEMLIMIT=%s should be 50-95%% of the memory limit %s", where, v, c.Resources.Limits["memory"])
		}
	}

	// SCORING_RULES names a key of a mounted ConfigMap that parses.
	if rules, ok := env["SCORING_RULES"]; ok {
		checkMountedRules(t, where, pod, c, configMaps, rules)
	}

	grace := time.Duration(30) * time.Second // Kubernetes' default
	if pod.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	}
	if want := shutdownTimeout(t, vars, env) + shutdownMargin; grace < want {
		t.Errorf("%s: terminationGracePeriodSeconds %s, want at least SHUTDOWN_TIMEOUT + %s = %s", where, grace, shutdownMargin, want)
	}
	return c
}

func checkMountedRules(t *testing.T, where string, pod podSpec, c k8sContainer, configMaps map[string]map[string][]byte, rules string) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(path.Clean(rules), path.Clean(m.MountPath)+"/")
		if !ok {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			key := path.Join(m.SubPath, rel)
			for _, it := range v.ConfigMap.Items {
				if it.Path == key {
					key = it.Key
				}
			}
			cm, ok := configMaps[v.ConfigMap.Name]
			if !ok {
				t.Errorf("%s: ConfigMap %s is not generated by the kustomization", where, v.ConfigMap.Name)
				return
			}
			data, ok := cm[key]
			if !ok {
				t.Errorf("%s: SCORING_RULES=%s: ConfigMap %s has no key %s", where, rules, v.ConfigMap.Name, key)
				return
			}
			checkRulesFile(t, where, "ConfigMap "+v.ConfigMap.Name+" key "+key, data)
			return
		}
	}
	t.Errorf("%s: SCORING_RULES=%s is not in a mounted ConfigMap", where, rules)
}

func firstSet[T any](ps ...*T) *T {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// k8sFixture is the base with what the tests derive from it.
type k8sFixture struct {
	base       k8sBundle
	vars       map[string]configVar
	uid        int64
	deployment k8sObject
	deploy     k8sDeployment
	container  k8sContainer
	env        map[string]string
}

func loadK8sBase(t *testing.T) k8sFixture {
	t.Helper()
	f := k8sFixture{base: loadKustomization(t, k8sBaseDir), vars: configVars(t)}
	f.uid, _ = dockerfileUser(t, loadDockerfile(t))
	f.deployment = f.base.one(t, "Deployment")
	f.deployment.decode(t, &f.deploy)
	if cs := f.deploy.Spec.Template.Spec.Containers; len(cs) != 1 {
		t.Fatalf("%s: %d containers, want 1", f.deployment, len(cs))
	}
	f.container = f.deploy.Spec.Template.Spec.Containers[0]
	f.env = map[string]string{}
	for _, e := range f.container.Env {
		if e.ValueFrom == nil {
			f.env[e.Name] = e.Value
		}
	}
	return f
}

func TestManifestK8sBase(t *testing.T) {
	t.Parallel()
	f := loadK8sBase(t)
	d, c := f.deploy.Spec, f.container
	where := f.deployment.String()
	podLabels := d.Template.Metadata.Labels

	t.Run("pod", func(t *testing.T) {
		t.Parallel()
		checkPod(t, where, d.Template.Spec, f.base.ConfigMaps, f.vars, f.uid)
	})

	t.Run("kustomization lists every manifest", func(t *testing.T) {
		t.Parallel()
		entries, err := os.ReadDir(repoFile(t, k8sBaseDir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if ext := path.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml") && e.Name() != "kustomization.yaml" && !slices.Contains(f.base.Resources, e.Name()) {
				t.Errorf("%s/%s is not listed in the kustomization's resources", k8sBaseDir, e.Name())
			}
		}
		for _, optional := range []string{"keda", "jobs"} {
			if slices.Contains(f.base.Resources, optional) {
				t.Errorf("%s lists %s: it is optional, keep it out of the base", k8sBaseDir, optional)
			}
		}
		for _, kind := range []string{"Deployment", "Service", "ServiceMonitor", "PodDisruptionBudget", "PrometheusRule"} {
			if len(f.base.find(kind)) != 1 {
				t.Errorf("the base has %d objects of kind %s, want 1", len(f.base.find(kind)), kind)
			}
		}
		if len(f.base.find("ScaledObject")) > 0 {
			t.Errorf("the base holds a ScaledObject: KEDA is optional (%s)", k8sKEDADir)
		}
	})

	t.Run("runs scorerefresh run", func(t *testing.T) {
		t.Parallel()
		if !slices.Equal(c.Args, []string{"run"}) {
			t.Errorf("%s: args %q, want [run]", where, c.Args)
		}
		if !d.Selector.selects(podLabels) {
			t.Errorf("%s: the selector %v does not select the pod labels %v", where, d.Selector.MatchLabels, podLabels)
		}
		if d.Replicas == nil || *d.Replicas < 2 {
			t.Errorf("%s: replicas %s, want at least 2 (one survives a disruption)", where, ptrString(d.Replicas))
		}
	})

	port := metricsPort(t, f.vars, f.env)
	t.Run("metrics port and probes", func(t *testing.T) {
		t.Parallel()
		named := false
		for _, p := range c.Ports {
			if p.Name == "metrics" {
				named = true
				if p.ContainerPort != port {
					t.Errorf("%s: port metrics is %d, METRICS_ADDR listens on %d", where, p.ContainerPort, port)
				}
			}
		}
		if !named {
			t.Fatalf("%s: no container port named metrics", where)
		}
		probes := map[string]*k8sProbe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe}
		for kind, p := range probes {
			if p == nil || p.HTTPGet == nil {
				t.Fatalf("%s: no HTTP %s probe", where, kind)
			}
			if !portMatches(p.HTTPGet.Port, "metrics", port) {
				t.Errorf("%s: %s probe on port %v, the health endpoints are on metrics (%d)", where, kind, p.HTTPGet.Port, port)
			}
			if p.TimeoutSeconds >= max(p.PeriodSeconds, 10) {
				t.Errorf("%s: %s probe timeout %ds not below its period %ds", where, kind, p.TimeoutSeconds, p.PeriodSeconds)
			}
		}
		live := c.LivenessProbe
		if window := time.Duration(max(live.FailureThreshold, 3)*max(live.PeriodSeconds, 10)) * time.Second; window < 90*time.Second {
			t.Errorf("%s: liveness restarts after %s of failures; a busy pod must not be killed: want 90s or more", where, window)
		}
		if c.StartupProbe != nil {
			t.Errorf("%s: a startup probe is not needed: /healthz answers as soon as the server listens", where)
		}
		checkProbePaths(t, c.LivenessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path, "/metrics")
	})

	t.Run("service and servicemonitor", func(t *testing.T) {
		t.Parallel()
		svcObj := f.base.one(t, "Service")
		var svc k8sService
		svcObj.decode(t, &svc)
		if !(labelSelector{MatchLabels: svc.Spec.Selector}).selects(podLabels) {
			t.Errorf("%s: selector %v does not select the pods %v", svcObj, svc.Spec.Selector, podLabels)
		}
		names := map[string]bool{}
		for _, p := range svc.Spec.Ports {
			names[p.Name] = true
			if !portMatches(p.TargetPort, "metrics", port) {
				t.Errorf("%s: port %s targets %v, want the container's metrics port", svcObj, p.Name, p.TargetPort)
			}
		}
		if re := absentJobRegexp(t); re != nil && !re.MatchString(svcObj.Metadata.Name) {
			t.Errorf("%s: Prometheus' job label will be %q, which the alerts' absent(up{job=~%q}) does not match", svcObj, svcObj.Metadata.Name, re)
		}
		smObj := f.base.one(t, "ServiceMonitor")
		var sm k8sServiceMonitor
		smObj.decode(t, &sm)
		if !sm.Spec.Selector.selects(svcObj.Metadata.Labels) {
			t.Errorf("%s: selector %v does not select the Service's labels %v", smObj, sm.Spec.Selector.MatchLabels, svcObj.Metadata.Labels)
		}
		if len(sm.Spec.Endpoints) == 0 {
			t.Fatalf("%s: no endpoints", smObj)
		}
		for _, e := range sm.Spec.Endpoints {
			if !names[e.Port] {
				t.Errorf("%s: endpoint port %q is not a port name of the Service", smObj, e.Port)
			}
			if e.Path != "" && e.Path != "/metrics" {
				t.Errorf("%s: path %s, the service serves /metrics", smObj, e.Path)
			}
		}
		// The operator attaches namespace, pod, service and job.
		for _, l := range dashboardTargetLabels(t) {
			if !slices.Contains([]string{"namespace", "pod", "service", "container", "endpoint"}, l) {
				t.Errorf("the dashboard selects on label %q, which the Prometheus Operator does not attach", l)
			}
		}
	})

	t.Run("disruption budget", func(t *testing.T) {
		t.Parallel()
		obj := f.base.one(t, "PodDisruptionBudget")
		var pdb k8sPDB
		obj.decode(t, &pdb)
		if !pdb.Spec.Selector.selects(podLabels) {
			t.Errorf("%s: selector %v does not select the pods %v", obj, pdb.Spec.Selector.MatchLabels, podLabels)
		}
		switch {
		case pdb.Spec.MaxUnavailable != nil:
			if n, ok := pdb.Spec.MaxUnavailable.(int); ok && d.Replicas != nil && n >= *d.Replicas {
				t.Errorf("%s: maxUnavailable %d lets every one of %d replicas go", obj, n, *d.Replicas)
			}
		case pdb.Spec.MinAvailable != nil:
			if n, ok := pdb.Spec.MinAvailable.(int); ok && d.Replicas != nil && n >= *d.Replicas {
				t.Errorf("%s: minAvailable %d blocks every drain with %d replicas", obj, n, *d.Replicas)
			}
		default:
			t.Errorf("%s: neither minAvailable nor maxUnavailable", obj)
		}
	})
}

func TestManifestK8sKEDA(t *testing.T) {
	t.Parallel()
	f := loadK8sBase(t)
	comp := loadKustomization(t, k8sKEDADir)
	if comp.Kind != "Component" {
		t.Errorf("%s: kind %s, want Component (added to an overlay of the base)", k8sKEDADir, comp.Kind)
	}
	obj := comp.one(t, "ScaledObject")
	var so k8sScaledObject
	obj.decode(t, &so)
	s := so.Spec
	if s.ScaleTargetRef.Name != f.deployment.Metadata.Name || (s.ScaleTargetRef.Kind != "" && s.ScaleTargetRef.Kind != "Deployment") {
		t.Errorf("%s: scales %s %s, want Deployment %s", obj, s.ScaleTargetRef.Kind, s.ScaleTargetRef.Name, f.deployment.Metadata.Name)
	}
	if s.MinReplicaCount == nil || *s.MinReplicaCount < 2 {
		t.Errorf("%s: minReplicaCount %s, want at least 2: the PodDisruptionBudget keeps one of them", obj, ptrString(s.MinReplicaCount))
	}
	if s.MaxReplicaCount == nil || s.MinReplicaCount == nil || *s.MaxReplicaCount < *s.MinReplicaCount {
		t.Errorf("%s: maxReplicaCount %s below minReplicaCount", obj, ptrString(s.MaxReplicaCount))
	}
	if s.Fallback != nil && s.MinReplicaCount != nil && s.Fallback.Replicas < *s.MinReplicaCount {
		t.Errorf("%s: fallback replicas %d below minReplicaCount", obj, s.Fallback.Replicas)
	}
	// The component must hand the replica count to the HPA.
	removes := false
	for _, p := range comp.Patches {
		if p.Target.Kind == "Deployment" && p.Target.Name == f.deployment.Metadata.Name && strings.Contains(p.Patch, "/spec/replicas") {
			removes = true
		}
	}
	if !removes {
		t.Errorf("%s: no patch removes the Deployment's spec.replicas; every apply would reset what KEDA scaled", k8sKEDADir)
	}
	exported := exportedFamilies(t)
	jobRE := regexp.MustCompile(`job="([^"]+)"`)
	if len(s.Triggers) == 0 {
		t.Fatalf("%s: no triggers", obj)
	}
	for _, tr := range s.Triggers {
		q := tr.Metadata["query"]
		if tr.Type != "prometheus" || q == "" {
			t.Errorf("%s: trigger %s without a Prometheus query", obj, tr.Type)
			continue
		}
		if v, err := strconv.ParseFloat(tr.Metadata["threshold"], 64); err != nil || v <= 0 {
			t.Errorf("%s: query %s: threshold %q is not a positive number", obj, q, tr.Metadata["threshold"])
		}
		if u, err := url.Parse(tr.Metadata["serverAddress"]); err != nil || u.Host == "" {
			t.Errorf("%s: serverAddress %q is not a URL", obj, tr.Metadata["serverAddress"])
		}
		names, err := promqlMetricNames(q)
		if err != nil || len(names) == 0 {
			t.Errorf("%s: query %s: no metric names (%v)", obj, q, err)
		}
		for _, n := range names {
			if !isExported(n, exported) {
				t.Errorf("%s: query %s reads %s, which the service does not export", obj, q, n)
			}
		}
		// Every replica reports the same queue gauges: summing them would
		// multiply the backlog by the replica count and scale up forever.
		if strings.Contains(q, "sum(") || strings.Contains(q, "sum by") {
			t.Errorf("%s: query %s sums the queue gauges; every replica reports the whole queue: use max", obj, q)
		}
		if m := jobRE.FindStringSubmatch(q); m != nil && m[1] != f.base.one(t, "Service").Metadata.Name {
			t.Errorf("%s: query %s selects job %q, but the job label is the Service's name", obj, q, m[1])
		}
	}
}

func TestManifestK8sReplayJob(t *testing.T) {
	t.Parallel()
	f := loadK8sBase(t)
	jobs := loadKustomization(t, k8sJobsDir)
	obj := jobs.one(t, "Job")
	var job k8sJob
	obj.decode(t, &job)
	where := obj.String()
	pod := job.Spec.Template
	c := checkPod(t, where, pod.Spec, jobs.ConfigMaps, f.vars, f.uid)
	if len(c.Args) == 0 || c.Args[0] != "replay" || !slices.Contains(c.Args, "--in") {
		t.Errorf("%s: args %q, want [replay --in FILE ...]", where, c.Args)
	}
	if c.Image != f.container.Image {
		t.Errorf("%s: image %s, the Deployment runs %s: replay with the release you run", where, c.Image, f.container.Image)
	}
	if job.Spec.BackoffLimit == nil || *job.Spec.BackoffLimit != 0 {
		t.Errorf("%s: backoffLimit %s, want 0: a retry loads the snapshot into the queue again", where, ptrString(job.Spec.BackoffLimit))
	}
	if pod.Spec.RestartPolicy != "Never" {
		t.Errorf("%s: restartPolicy %q, want Never", where, pod.Spec.RestartPolicy)
	}
	_, secrets := c.env(t, where)
	_, prodSecrets := f.container.env(t, f.deployment.String())
	if secrets["MONGODB_URI"] != "" && secrets["MONGODB_URI"] == prodSecrets["MONGODB_URI"] {
		t.Errorf("%s: MONGODB_URI comes from %s, the production Secret: a replay must target staging", where, secrets["MONGODB_URI"])
	}
	// The replay's pods are neither scraped as consumers nor counted by the
	// disruption budget.
	var svc k8sService
	f.base.one(t, "Service").decode(t, &svc)
	var pdb k8sPDB
	f.base.one(t, "PodDisruptionBudget").decode(t, &pdb)
	if (labelSelector{MatchLabels: svc.Spec.Selector}).selects(pod.Metadata.Labels) || pdb.Spec.Selector.selects(pod.Metadata.Labels) {
		t.Errorf("%s: the pod labels %v match the consumer's Service or PodDisruptionBudget", where, pod.Metadata.Labels)
	}
}

// TestManifestKustomizeBuild renders the base, the KEDA component and the
// replay Job with kustomize, where kubectl is installed.
func TestManifestKustomizeBuild(t *testing.T) {
	t.Parallel()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not on PATH: the kustomizations are checked by the other TestManifestK8s tests only")
	}
	overlay := t.TempDir()
	baseRel, err := filepath.Rel(overlay, repoFile(t, k8sBaseDir))
	if err != nil {
		t.Fatal(err)
	}
	baseRel = filepath.ToSlash(baseRel)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(
		"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: ["+baseRel+"]\ncomponents: ["+baseRel+"/keda]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	render := func(t *testing.T, dir string) map[string][]map[string]any {
		t.Helper()
		out, err := exec.CommandContext(t.Context(), kubectl, "kustomize", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
		}
		byKind := map[string][]map[string]any{}
		dec := yaml.NewDecoder(strings.NewReader(string(out)))
		for {
			var o map[string]any
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("kubectl kustomize %s: output: %v", dir, err)
			}
			kind, _ := o["kind"].(string)
			byKind[kind] = append(byKind[kind], o)
		}
		return byKind
	}
	field := func(o map[string]any, keys ...string) any {
		var v any = o
		for _, k := range keys {
			m, _ := v.(map[string]any)
			v = m[k]
		}
		return v
	}
	t.Run("base", func(t *testing.T) {
		t.Parallel()
		objs := render(t, repoFile(t, k8sBaseDir))
		for _, kind := range []string{"ConfigMap", "Deployment", "Service", "ServiceMonitor", "PodDisruptionBudget", "PrometheusRule"} {
			if len(objs[kind]) != 1 {
				t.Errorf("rendered base: %d %s, want 1", len(objs[kind]), kind)
			}
		}
		if len(objs["ConfigMap"]) == 1 && len(objs["Deployment"]) == 1 {
			cm := field(objs["ConfigMap"][0], "metadata", "name")
			vols, _ := field(objs["Deployment"][0], "spec", "template", "spec", "volumes").([]any)
			refs := false
			for _, v := range vols {
				refs = refs || field(v.(map[string]any), "configMap", "name") == cm
			}
			if !refs {
				t.Errorf("rendered base: the Deployment does not mount the generated ConfigMap %v", cm)
			}
		}
	})
	t.Run("keda", func(t *testing.T) {
		t.Parallel()
		objs := render(t, overlay)
		if len(objs["ScaledObject"]) != 1 {
			t.Errorf("rendered with KEDA: %d ScaledObject, want 1", len(objs["ScaledObject"]))
		}
		if len(objs["Deployment"]) == 1 && field(objs["Deployment"][0], "spec", "replicas") != nil {
			t.Errorf("rendered with KEDA: the Deployment still sets replicas")
		}
	})
	t.Run("jobs", func(t *testing.T) {
		t.Parallel()
		objs := render(t, repoFile(t, k8sJobsDir))
		if len(objs["Job"]) != 1 || len(objs["ConfigMap"]) != 1 {
			t.Errorf("rendered jobs: %d Job and %d ConfigMap, want 1 each", len(objs["Job"]), len(objs["ConfigMap"]))
		}
	})
}

// TestManifestComposePrometheusConfig runs promtool on the compose
// Prometheus configuration (and so on the rule file it loads).
func TestManifestComposePrometheusConfig(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("promtool not on PATH (apt-get install prometheus); CI runs this test")
		}
		t.Fatalf("promtool not on PATH in CI: %v", err)
	}
	cmd := exec.CommandContext(t.Context(), bin, "check", "config", "deploy/compose/prometheus.yml")
	cmd.Dir = repoFile(t, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
}
