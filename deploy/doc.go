// Package deploy holds the deployment assets of scorerefresh (alerts, dashboards, manifests, the
// compose stack, the Dockerfile and image/, a module of its own) and the tests that keep them
// honest, since neither Docker nor Kubernetes runs where they are built: every query names only
// metrics the service exports, the two rule files agree, every alert has a runbook section in
// docs/runbook.md, and every manifest agrees with the code. The directive below generates
// grafana/provisioning/alerting from prometheus/alerts.yml.
package deploy

//go:generate go run ./cmd/grafana-alerts
