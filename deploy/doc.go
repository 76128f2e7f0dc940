// Package deploy holds the deployment assets of scorerefresh and the tests
// that keep them honest, since neither Docker nor Kubernetes runs where they
// are built: the Prometheus alerts (prometheus/alerts.yml, with promtool unit
// tests in prometheus/alerts_test.yml), the same rules as a Prometheus
// Operator PrometheusRule (k8s/prometheusrule.yaml), the Grafana dashboard
// (grafana/scorerefresh.json, and its sidecar ConfigMap), the Alertmanager
// inhibition (alertmanager/), the kustomize base, its KEDA and runbook
// components and replay Job (k8s/) and an example overlay (overlays/), the
// compose stack (../docker-compose.yml, compose/), the Dockerfile and the
// image builder without Docker (image/, a module of its own). The tests check
// that every query names only metrics the service exports, that the two rule
// files agree, that every alert has a runbook section in docs/runbook.md, and
// that every manifest agrees with the code (environment variables, ports,
// probes, grace periods, rules files). The directive below generates the
// Grafana-managed alerts (grafana/provisioning/alerting) from
// prometheus/alerts.yml.
package deploy

//go:generate go run ./cmd/grafana-alerts
