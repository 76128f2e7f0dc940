package deploy

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestManifestGracePeriodCoversTheShutdown checks the Deployment's grace
// period against the longest shutdown the code allows for the manifest's
// SHUTDOWN_TIMEOUT (app.ShutdownBudget), and that the comment above it
// adds up to that figure: a kubelet's SIGKILL before the final flush
// leaves leases for everyone to wait out.
func TestManifestGracePeriodCoversTheShutdown(t *testing.T) {
	t.Parallel()
	f := loadK8sBase(t)
	pod := f.deploy.Spec.Template.Spec
	if pod.TerminationGracePeriodSeconds == nil {
		t.Fatalf("%s: no terminationGracePeriodSeconds (Kubernetes' 30s default is below any shutdown budget)", f.deployment)
	}
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	budget := shutdownBudget(t, f.vars, f.env)
	if grace < budget {
		t.Errorf("%s: terminationGracePeriodSeconds %s below the shutdown budget %s", f.deployment, grace, budget)
	}
	// The comment's sum is the budget, whatever the SHUTDOWN_TIMEOUT.
	src := string(readAsset(t, "deploy/k8s/deployment.yaml"))
	at := strings.Index(src, "terminationGracePeriodSeconds:")
	sum := regexp.MustCompile(`= (\d+)s`).FindAllStringSubmatch(src[:at], -1)
	want := fmt.Sprintf("%d", int(budget.Seconds()))
	if len(sum) == 0 || sum[len(sum)-1][1] != want {
		t.Errorf("deploy/k8s/deployment.yaml: the comment above terminationGracePeriodSeconds should add up to the shutdown budget, \"= %ss\"", want)
	}
}
