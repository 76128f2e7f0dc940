package replay

import (
	"html/template"
	"io"
	"strings"
)

var pageTemplate = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Drain report: {{.R.Input}}</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px; color: #111; max-width: 1000px; }
table { border-collapse: collapse; margin: 12px 0 20px; }
td, th { padding: 3px 14px 3px 0; text-align: left; border-bottom: 1px solid #eee; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.bad { color: #b91c1c; font-weight: 600; }
svg { max-width: 100%; height: auto; }
</style></head><body>
<h1>Drain report</h1>
<p>{{.R.Input}} replayed at {{.R.StartedAt.Format "2006-01-02 15:04:05 MST"}} on {{.R.Settings.Server}}
({{.R.Settings.Database}}); arrival {{.R.Arrival}} ×{{.R.Speed}}.
{{if .R.Drained}}The queue drained.{{else}}<span class="bad">The queue did not drain ({{.R.StopReason}}).</span>{{end}}
{{if .R.Error}}<span class="bad">{{.R.Error}}</span>{{end}}</p>
<table>{{range .Rows}}<tr><th>{{.Name}}</th><td class="n">{{.Value}}</td></tr>
{{end}}</table>
{{.Chart}}
<p>The timeline, one row per second, is in <a href="timeline.csv">timeline.csv</a>; the summary in <a href="report.json">report.json</a>.</p>
{{if .R.Skipped}}<h2>Skipped lines ({{.R.SkippedLines}})</h2>
<table><tr><th>file</th><th>line</th><th>error</th></tr>
{{range .R.Skipped}}<tr><td>{{.File}}</td><td class="n">{{.Line}}</td><td>{{.Error}}</td></tr>
{{end}}</table>{{end}}
</body></html>
`))

// WriteHTML writes a self-contained page: the summary table, the chart
// inline, and any skipped lines.
func (r *Report) WriteHTML(w io.Writer) error {
	var svg strings.Builder
	if err := r.WriteSVG(&svg); err != nil {
		return err
	}
	return pageTemplate.Execute(w, struct {
		R     *Report
		Rows  []metricRow
		Chart template.HTML
	}{r, r.rows(), template.HTML(svg.String())}) // WriteSVG escapes every text it draws
}
