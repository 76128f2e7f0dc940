// Command grafana-alerts writes Grafana-managed alert rules (file
// provisioning) from the Prometheus alerting rules, so both kinds of
// alerting run the same definitions:
//
//	go generate ./deploy
//	go run ./deploy/cmd/grafana-alerts -runbook-base https://git.example.com/scorerefresh/blob/v1.2.3 -out my-alerts.yaml
//
// The paths default to the repository's, relative to deploy/ (where go generate runs it).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/scorerefresh/scorerefresh/deploy/internal/grafanaalerts"
)

func main() {
	opts := grafanaalerts.DefaultOptions
	in := flag.String("in", "prometheus/alerts.yml", "the Prometheus rule file to read")
	out := flag.String("out", "grafana/provisioning/alerting/scorerefresh.yaml", "the Grafana provisioning file to write")
	flag.StringVar(&opts.DatasourceUID, "datasource-uid", opts.DatasourceUID, "uid of the Prometheus datasource the rules query; ${VAR} is expanded by Grafana from its environment")
	flag.StringVar(&opts.Folder, "folder", opts.Folder, "Grafana folder of the rule groups")
	flag.StringVar(&opts.Interval, "interval", opts.Interval, "evaluation interval of each group")
	flag.StringVar(&opts.RunbookBase, "runbook-base", opts.RunbookBase, "replaces what precedes /docs/runbook.md# in every runbook_url (empty: this release's on GitHub)")
	flag.Parse()
	src, err := os.ReadFile(*in)
	if err != nil {
		err = fmt.Errorf("reading the Prometheus rules: %w", err)
	} else if src, err = grafanaalerts.Generate(src, opts); err != nil {
		err = fmt.Errorf("%s: %w", *in, err)
	} else if err = os.WriteFile(*out, src, 0o644); err != nil {
		err = fmt.Errorf("writing the Grafana rules: %w", err)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "grafana-alerts: %v\n", err)
		os.Exit(1)
	}
}
