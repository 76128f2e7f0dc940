// Package deploy holds the deployment assets of scorerefresh and the tests
// that keep them honest: the Prometheus alerts (prometheus/alerts.yml, with
// promtool unit tests in prometheus/alerts_test.yml), the same rules as a
// Prometheus Operator PrometheusRule (k8s/prometheusrule.yaml) and the Grafana
// dashboard (grafana/scorerefresh.json). The tests check that every query
// names only metrics the service exports, that the two rule files agree, and
// that every alert has a runbook section in docs/runbook.md.
//
// There is no code here: the package exists for its tests.
package deploy
