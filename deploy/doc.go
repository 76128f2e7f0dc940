// Package deploy holds the deployment assets of scorerefresh (the Prometheus
// alerts, with promtool unit tests, and their PrometheusRule twin in k8s/, the
// Grafana dashboard and alerts, the Alertmanager inhibition, the kustomize
// base, components, replay Job and overlays, the compose stack, the Dockerfile
// and image/, the image builder without Docker, a module of its own) and the
// tests that keep them honest, since neither Docker nor Kubernetes runs where
// they are built: every query names only metrics the service exports, the two
// rule files agree, every alert has a runbook section in docs/runbook.md, and
// every manifest agrees with the code (environment variables, ports, probes,
// grace periods, rules files). The directive below generates the
// Grafana-managed alerts (grafana/provisioning/alerting) from
// prometheus/alerts.yml.
package deploy

//go:generate go run ./cmd/grafana-alerts
