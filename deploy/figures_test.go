package deploy

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/internal/config"
)

// figureDocs are the documents that speak of the Deployment's timings and
// connections. docs/runbook.md states each figure; the others link to it or
// state the same.
var figureDocs = []string{"README.md", "docs/guide.md", "bench/results/NOTES.md", "deploy/DEPLOYING.md", runbookPath, "deploy/k8s/deployment.yaml", "deploy/k8s/keda/scaledobject.yaml"}

// manifestConfig is the configuration the Deployment's literal environment
// gives the service.
func manifestConfig(t *testing.T, env map[string]string) config.Config {
	t.Helper()
	var environ []string
	for k, v := range env {
		if !goRuntimeVars[k] {
			environ = append(environ, k+"="+v)
		}
	}
	cfg, err := config.Parse(environ)
	if err != nil {
		t.Fatalf("the Deployment's environment: %v", err)
	}
	return cfg
}

// sentences splits a document into sentences (and table cells, list items
// and clauses after a semicolon), its line breaks joined.
func sentences(doc string) []string {
	doc = strings.ReplaceAll(doc, "\n#", " ") // YAML comments continue across lines
	doc = strings.Join(strings.Fields(doc), " ")
	return regexp.MustCompile(`[.;|]\s|\s-\s|:\s\s`).Split(doc, -1)
}

// paragraphs splits a document at blank lines and table rows.
func paragraphs(doc string) []string {
	return regexp.MustCompile(`\n\s*\n|\n\|`).Split(doc, -1)
}

// durationRE finds a duration in prose: 282 s, 20s, 4½ minutes, 2 min.
var durationRE = regexp.MustCompile(`(\d+(?:\.\d+)?[½¼¾]?|[½¼¾])\s?(minutes?|min|s)\b`)

func proseSeconds(num, unit string) float64 {
	frac := map[string]float64{"½": .5, "¼": .25, "¾": .75}
	v := 0.0
	for f, x := range frac {
		if n, ok := strings.CutSuffix(num, f); ok {
			num, v = n, x
		}
	}
	if num != "" {
		n, _ := strconv.ParseFloat(num, 64)
		v += n
	}
	if strings.HasPrefix(unit, "min") {
		v *= 60
	}
	return v
}

// TestDocumentedLivenessTiming derives how long a wedged replica runs before
// its restart from the code (app.WedgedAfter, app.RestartAfter) and the
// Deployment's probe, and checks every document that speaks of liveness: a
// duration of a minute or more in a sentence about it must be one of the
// derived figures, and the runbook and the manifest state them.
func TestDocumentedLivenessTiming(t *testing.T) {
	t.Parallel()
	f := loadK8sBase(t)
	cfg := manifestConfig(t, f.env)
	live := f.container.LivenessProbe
	if live == nil {
		t.Fatalf("%s: no liveness probe", f.deployment)
	}
	period := time.Duration(max(live.PeriodSeconds, 10)) * time.Second // Kubernetes' default period
	threshold := max(live.FailureThreshold, 3)
	wedged, restart := app.WedgedAfter(cfg), app.RestartAfter(cfg, period, threshold)
	if wedged < 2*time.Minute {
		t.Errorf("app.WedgedAfter = %s: a slow claim round would restart a working pod", wedged)
	}
	allowed := []time.Duration{wedged, restart}
	secs := func(d time.Duration) string { return strconv.Itoa(int(d.Seconds())) + " s" }
	for _, doc := range figureDocs {
		text := string(readAsset(t, doc))
		for _, s := range sentences(text) {
			low := strings.ToLower(s)
			if !strings.Contains(low, "liveness") && !strings.Contains(low, "healthz") && !strings.Contains(low, "wedged") {
				continue
			}
			for _, m := range durationRE.FindAllStringSubmatch(s, -1) {
				v := proseSeconds(m[1], m[2])
				if v < 60 {
					continue // a part of the sum: a period, a deadline
				}
				ok := false
				for _, a := range allowed {
					ok = ok || (v >= a.Seconds()-5 && v <= a.Seconds()+5) // 4¾ minutes for 282 s
				}
				if !ok {
					t.Errorf("%s: %q states %s; the code and the probe give %s before /healthz fails and %s before a restart (app.WedgedAfter, app.RestartAfter)", doc, s, m[0], secs(wedged), secs(restart))
				}
			}
		}
	}
	rb := strings.Join(strings.Fields(string(readAsset(t, runbookPath))), " ")
	for _, want := range []string{"restarted within " + secs(restart), "silent for " + secs(wedged)} {
		if !strings.Contains(rb, want) {
			t.Errorf("%s: the figures section should say %q", runbookPath, want)
		}
	}
	dep := strings.Join(strings.Fields(string(readAsset(t, "deploy/k8s/deployment.yaml"))), " ")
	for _, want := range []string{secs(wedged), secs(restart)} {
		if !strings.Contains(dep, want) {
			t.Errorf("deploy/k8s/deployment.yaml: the liveness probe's comment should state %s", want)
		}
	}
}

// TestDocumentedConnectionFigures derives the connections a fleet opens
// (app.FleetConnections) for the base's replicas and the KEDA component's
// maxReplicaCount, and checks the figures the documents give: every "= N"
// in a paragraph about connections is one of the derived figures.
func TestDocumentedConnectionFigures(t *testing.T) {
	t.Parallel()
	f := loadK8sBase(t)
	cfg := manifestConfig(t, f.env)
	comp := loadKustomization(t, k8sKEDADir)
	var so k8sScaledObject
	comp.one(t, "ScaledObject").decode(t, &so)
	if so.Spec.MaxReplicaCount == nil || f.deploy.Spec.Replicas == nil {
		t.Fatal("no maxReplicaCount or no replicas to derive the figures from")
	}
	keda, base := app.FleetConnections(cfg, *so.Spec.MaxReplicaCount), app.FleetConnections(cfg, *f.deploy.Spec.Replicas)
	perReplica := app.ConnectionsPerReplica(cfg)
	allowed := map[int]bool{keda: true, base: true, perReplica: true, int(app.PoolSize(cfg)): true,
		3 * perReplica: true} // the README's example of 3 replicas, without a surge
	eq := regexp.MustCompile(`=\s?\*{0,2}(\d[\d,]*)\b`) // a count, not 68s
	for _, doc := range figureDocs {
		for _, s := range paragraphs(string(readAsset(t, doc))) {
			if !strings.Contains(strings.ToLower(s), "connection") {
				continue
			}
			for _, m := range eq.FindAllStringSubmatch(s, -1) {
				n, err := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
				if err == nil && !allowed[n] {
					t.Errorf("%s: %q gives %d connections; the code gives %d per replica, %d for the base's fleet and %d with KEDA's maxReplicaCount (app.FleetConnections, one surge pod)", doc, s, n, perReplica, base, keda)
				}
			}
		}
	}
	rb := strings.Join(strings.Fields(string(readAsset(t, runbookPath))), " ")
	if want := "Connections: " + strconv.Itoa(keda) + " at most"; !strings.Contains(rb, want) {
		t.Errorf("%s: the figures section should say %q", runbookPath, want)
	}
	if src := string(readAsset(t, "deploy/k8s/keda/scaledobject.yaml")); !strings.Contains(src, "= "+strconv.Itoa(keda)+" connections") {
		t.Errorf("deploy/k8s/keda/scaledobject.yaml: maxReplicaCount's comment should give %d connections", keda)
	}
}

// memoryFigureDoc records the production binary's measured peak memory.
const memoryFigureDoc = "docs/dead-letters.md"

// measuredPeakMiB reads the peak resident memory recorded in
// memoryFigureDoc's table (the column headed "peak RSS"), the largest
// figure of every row.
func measuredPeakMiB(t *testing.T) float64 {
	t.Helper()
	col, peak := -1, 0.0
	mib := regexp.MustCompile(`(\d+(?:\.\d+)?) MiB`)
	for line := range strings.Lines(string(readAsset(t, memoryFigureDoc))) {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if !strings.HasPrefix(strings.TrimSpace(line), "|") {
			col = -1
			continue
		}
		if col < 0 {
			for i, c := range cells {
				if strings.Contains(c, "peak RSS") {
					col = i
				}
			}
			continue
		}
		if col >= len(cells) {
			continue
		}
		for _, m := range mib.FindAllStringSubmatch(cells[col], -1) {
			v, _ := strconv.ParseFloat(m[1], 64)
			peak = max(peak, v)
		}
	}
	if peak == 0 {
		t.Fatalf("%s: no table with a \"peak RSS\" column giving MiB", memoryFigureDoc)
	}
	return peak
}

// TestMemoryRequestCoversMeasuredPeak holds the Deployment's memory to the
// figure measured at pod size: the request reserves at least the recorded
// peak (else the scheduler packs pods onto memory they will use), the limit
// is above it, and the manifest and DEPLOYING.md cite the figure and the
// command that measures it.
func TestMemoryRequestCoversMeasuredPeak(t *testing.T) {
	t.Parallel()
	peak := measuredPeakMiB(t)
	f := loadK8sBase(t)
	req, err1 := Quantity(f.container.Resources.Requests["memory"])
	lim, err2 := Quantity(f.container.Resources.Limits["memory"])
	if err1 != nil || err2 != nil {
		t.Fatalf("%s: memory request %q (%v), limit %q (%v)", f.deployment, f.container.Resources.Requests["memory"], err1, f.container.Resources.Limits["memory"], err2)
	}
	if req < peak*(1<<20) {
		t.Errorf("%s: memory request %s is under the peak of %.1f MiB recorded in %s", f.deployment, f.container.Resources.Requests["memory"], peak, memoryFigureDoc)
	}
	if lim <= req {
		t.Errorf("%s: memory limit %s leaves no room over the request %s", f.deployment, f.container.Resources.Limits["memory"], f.container.Resources.Requests["memory"])
	}
	figure := strconv.FormatFloat(peak, 'f', 1, 64) + " MiB"
	for _, doc := range []string{"deploy/k8s/deployment.yaml", "deploy/DEPLOYING.md"} {
		text := strings.Join(strings.Fields(string(readAsset(t, doc))), " ")
		for _, want := range []string{figure, "-run TestHostileHeadDrainsInAPod", f.container.Resources.Requests["memory"]} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: should cite %q (the measured peak, the command that measures it, the request)", doc, want)
			}
		}
	}
}

// TestDataVolumeIsWritable holds the runbook's snapshot step to the pod: the
// root filesystem is read-only, so /data (the image's working directory) is
// an emptyDir the container mounts writable.
func TestDataVolumeIsWritable(t *testing.T) {
	t.Parallel()
	f := loadK8sBase(t)
	var mounted bool
	for _, m := range f.container.VolumeMounts {
		if m.MountPath != "/data" || m.ReadOnly {
			continue
		}
		for _, v := range f.deploy.Spec.Template.Spec.Volumes {
			mounted = mounted || (v.Name == m.Name && v.EmptyDir != nil && v.EmptyDir.SizeLimit != "")
		}
	}
	if !mounted {
		t.Errorf("%s: no emptyDir with a sizeLimit mounted writable at /data", f.deployment)
	}
	if !strings.Contains(string(readAsset(t, "Dockerfile")), "WORKDIR /data") {
		t.Errorf("Dockerfile: the working directory is no longer /data, which the Deployment mounts writable")
	}
	for _, doc := range []string{runbookPath, "deploy/DEPLOYING.md"} {
		text := strings.Join(strings.Fields(string(readAsset(t, doc))), " ")
		if want := "kubectl exec deploy/scorerefresh -- " + dockerfileEntrypoint(t)[0] + " snapshot --out - --gzip > "; !strings.Contains(text, want) {
			t.Errorf("%s: no recipe copying a snapshot out of the pod on stdout (%q, the image's binary)", doc, want)
		}
	}
}

// dockerfileEntrypoint is the runtime stage's ENTRYPOINT: where the binary
// is in the image.
func dockerfileEntrypoint(t *testing.T) []string {
	t.Helper()
	stages := loadDockerfile(t)
	var argv []string
	for _, in := range stages[len(stages)-1].Lines {
		if in.Cmd == "ENTRYPOINT" {
			var err error
			if argv, err = ExecForm(in); err != nil {
				t.Fatalf("Dockerfile: %v", err)
			}
		}
	}
	if len(argv) == 0 {
		t.Fatal("Dockerfile: the runtime stage has no ENTRYPOINT")
	}
	return argv
}
