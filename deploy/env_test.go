package deploy

// Neither Docker nor Kubernetes runs where this repository is developed, so the
// Dockerfile (dockerfile_test.go), docker-compose.yml (compose_test.go) and the
// manifests under deploy/k8s (k8s_test.go) are checked by parsing them
// (assetparse_*_test.go) and comparing them with the code: the
// environment variables and defaults of config.Config, the probe paths the
// metrics handler serves, the ldflags variables of cmd/scorerefresh, the rules
// parser, the exported metric names. Where kubectl or promtool is installed,
// they check too. This file holds what those checks share: the asset paths and
// the service's environment as the code defines it.
//
// Shared with the other tests of this package: repoRoot, readAsset,
// decodeYAML, absentJobRegexp and the asset paths (alerts_test.go),
// loadDashboard, variableQuery and dashboardTargetLabels (dashboard_test.go),
// exportedFamilies and isExported (metrics_test.go), promqlMetricNames
// (promql_test.go).

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/internal/config"
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

// shutdownBudget is what a grace period must leave the service after
// SIGTERM for the manifest's SHUTDOWN_TIMEOUT (app.ShutdownBudget: the claim
// round's cleanup, the refreshes, the final flush, the metrics server).
// Killed sooner, claims wait out LEASE_DURATION.
func shutdownBudget(t *testing.T, vars map[string]configVar, env map[string]string) time.Duration {
	t.Helper()
	return app.ShutdownBudget(config.Config{ShutdownTimeout: shutdownTimeout(t, vars, env)})
}

// goRuntimeVars are the variables a manifest may set besides config.Config's:
// the Go runtime reads them, not the service.
var goRuntimeVars = map[string]bool{"GOMEMLIMIT": true, "GOMAXPROCS": true, "GOGC": true, "GODEBUG": true}

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

// configVar is one environment variable of config.Config.
type configVar struct {
	Name    string
	Type    string // Go type: string, int, bool or time.Duration
	Default string // config.Defaults()'s value, as fmt prints it
}

// configVars reads config.Config's env tags and config.Defaults().
func configVars(t *testing.T) map[string]configVar {
	t.Helper()
	defaults := reflect.ValueOf(config.Defaults())
	typ := defaults.Type()
	vars := map[string]configVar{}
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("env"), ",")
		if name == "" {
			continue
		}
		vars[name] = configVar{Name: name, Type: typ.Field(i).Type.String(), Default: fmt.Sprint(defaults.Field(i).Interface())}
	}
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
				if _, err := GoMemLimit(value); err != nil {
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
