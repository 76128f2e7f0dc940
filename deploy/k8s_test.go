package deploy

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

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
		Name     string `yaml:"name"`
		EmptyDir *struct {
			SizeLimit string `yaml:"sizeLimit"`
		} `yaml:"emptyDir"`
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
		ReadOnly  bool   `yaml:"readOnly"`
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
	if err := ImagePinned(c.Image); err != nil {
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
		req, errReq := Quantity(c.Resources.Requests[r])
		lim, errLim := Quantity(c.Resources.Limits[r])
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
		soft, err1 := GoMemLimit(v)
		hard, err2 := Quantity(c.Resources.Limits["memory"])
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
	if want := shutdownBudget(t, vars, env); grace < want {
		t.Errorf("%s: terminationGracePeriodSeconds %s, want at least the shutdown's budget for SHUTDOWN_TIMEOUT=%s, %s (app.ShutdownBudget)", where, grace, shutdownTimeout(t, vars, env), want)
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
		for _, optional := range []string{"keda", "jobs", "runbook"} {
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
	// The overlay's own settings, none of them the defaults, so a value left
	// hard-coded in a component shows.
	const (
		ns, job, prom = "payments-prod", "scorerefresh-consumer", "http://prom.example.internal:9090"
		runbook       = "https://git.example.com/ops/scorerefresh/blob/v9.9.9"
	)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(
		"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: "+ns+"\nresources: ["+baseRel+", settings.yaml]\ncomponents: ["+baseRel+"/keda, "+baseRel+"/runbook]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "settings.yaml"), []byte(
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: scorerefresh-settings\n  annotations: {config.kubernetes.io/local-config: \"true\"}\n"+
			"data:\n  namespace: "+ns+"\n  job: "+job+"\n  prometheus: "+prom+"\n  runbookBase: "+runbook+"\n"), 0o644); err != nil {
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
		if len(objs["ConfigMap"]) != 1 {
			t.Errorf("rendered with KEDA: %d ConfigMaps, want the rules' alone (the settings are local-config)", len(objs["ConfigMap"]))
		}
		for _, so := range objs["ScaledObject"] {
			triggers, _ := field(so, "spec", "triggers").([]any)
			for _, tr := range triggers {
				md, _ := tr.(map[string]any)["metadata"].(map[string]any)
				q, _ := md["query"].(string)
				if !strings.Contains(q, `namespace="`+ns+`"`) || !strings.Contains(q, `job="`+job+`"`) {
					t.Errorf("rendered with KEDA: query %s does not select the overlay's namespace %s and job %s", q, ns, job)
				}
				if md["serverAddress"] != prom {
					t.Errorf("rendered with KEDA: serverAddress %v, want the overlay's %s", md["serverAddress"], prom)
				}
			}
			if len(triggers) == 0 {
				t.Errorf("rendered with KEDA: no triggers")
			}
		}
		urls := 0
		for _, pr := range objs["PrometheusRule"] {
			groups, _ := field(pr, "spec", "groups").([]any)
			for _, g := range groups {
				rules, _ := g.(map[string]any)["rules"].([]any)
				for _, r := range rules {
					u, ok := field(r.(map[string]any), "annotations", "runbook_url").(string)
					if !ok {
						continue
					}
					urls++
					if !strings.HasPrefix(u, runbook+"/"+runbookPath+"#") {
						t.Errorf("rendered with the runbook component: runbook_url %s, want it under %s", u, runbook)
					}
				}
			}
		}
		if urls == 0 {
			t.Errorf("rendered with the runbook component: no runbook_url")
		}
	})
	t.Run("example overlay", func(t *testing.T) {
		t.Parallel()
		objs := render(t, repoFile(t, "deploy/overlays/example"))
		if len(objs["ScaledObject"]) != 1 || len(objs["Deployment"]) != 1 {
			t.Fatalf("rendered example overlay: %d ScaledObject, %d Deployment, want 1 each", len(objs["ScaledObject"]), len(objs["Deployment"]))
		}
		ns := field(objs["Deployment"][0], "metadata", "namespace")
		triggers, _ := field(objs["ScaledObject"][0], "spec", "triggers").([]any)
		for _, tr := range triggers {
			q, _ := field(tr.(map[string]any), "metadata", "query").(string)
			if !strings.Contains(q, fmt.Sprintf(`namespace="%v"`, ns)) {
				t.Errorf("example overlay: the Deployment runs in %v but KEDA's query %s selects another namespace (settings.yaml)", ns, q)
			}
		}
	})
	t.Run("grafana dashboard", func(t *testing.T) {
		t.Parallel()
		objs := render(t, repoFile(t, "deploy/grafana"))
		if len(objs["ConfigMap"]) != 1 {
			t.Fatalf("rendered deploy/grafana: %d ConfigMaps, want 1", len(objs["ConfigMap"]))
		}
		cm := objs["ConfigMap"][0]
		if field(cm, "metadata", "labels", "grafana_dashboard") != "1" {
			t.Errorf("dashboard ConfigMap: labels %v, want grafana_dashboard: \"1\" (what the sidecar selects)", field(cm, "metadata", "labels"))
		}
		data, _ := field(cm, "data", "scorerefresh.json").(string)
		if data != string(readAsset(t, dashboardPath)) {
			t.Errorf("dashboard ConfigMap: its scorerefresh.json is not %s", dashboardPath)
		}
		// kubectl apply keeps the whole object in an annotation of at most 256 KiB.
		if len(data) > 200<<10 {
			t.Errorf("dashboard ConfigMap: %d bytes; kubectl apply's last-applied annotation would not hold it", len(data))
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
