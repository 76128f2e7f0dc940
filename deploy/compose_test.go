package deploy

import (
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

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
				if err := ImagePinned(s.Image); err != nil {
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
		} else if want := shutdownBudget(t, vars, consumer.Environment); grace < want {
			t.Errorf("%s: %s: stop_grace_period %s, want at least the shutdown's budget %s (app.ShutdownBudget)", composePath, roles.consumer, grace, want)
		}
		if _, ok := consumer.publishedPort(metricsPortN); !ok {
			t.Errorf("%s: %s publishes no port for METRICS_ADDR's %d (ports %q)", composePath, roles.consumer, metricsPortN, consumer.Ports)
		}
	})

	t.Run("mongo replica set", func(t *testing.T) {
		t.Parallel()
		mongo := c.Services[roles.mongo]
		if v, ok := LeadingVersion(ImageTag(mongo.Image)); !ok || v[0] < 6 {
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
		UID  string `yaml:"uid"`
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
	dsTypes, promUIDs := map[string]bool{}, map[string]bool{}
	for _, x := range grafanaProvisioning(t, g, "/etc/grafana/provisioning/datasources", func() any { return &grafanaDatasources{} }) {
		for _, ds := range x.(*grafanaDatasources).Datasources {
			dsTypes[ds.Type] = true
			if ds.Type == "prometheus" {
				promUIDs[ds.UID] = true
			}
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
	// The Grafana-managed alert rules: mounted where Grafana provisions
	// alerting from, querying the provisioned Prometheus by the uid that
	// Grafana's environment gives ${DS_PROMETHEUS}.
	if host := g.hostPath(t, path.Join("/etc/grafana/provisioning/alerting", path.Base(grafanaAlertsPath))); host != grafanaAlertsPath {
		t.Errorf("%s: Grafana's /etc/grafana/provisioning/alerting does not hold %s (it holds %q)", composePath, grafanaAlertsPath, host)
	}
	if uid := g.Environment["DS_PROMETHEUS"]; !promUIDs[uid] {
		t.Errorf("%s: Grafana's DS_PROMETHEUS is %q, not the uid of a provisioned Prometheus datasource (%v): the alert rules would query nothing", composePath, uid, promUIDs)
	}
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
