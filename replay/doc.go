// Package replay takes and replays backlog snapshots, to answer "would this
// backlog wedge us, and how long would it take to drain?" before and after a
// change, and to reproduce an incident in staging (docs/contract.md).
//
// The pieces, in the order an operator meets them:
//
//   - Snapshot (snapshot.go) streams the queue, and optionally the source
//     collections the rules read, to Extended JSON files (what mongoexport
//     writes) with a manifest.
//   - Generate (generate.go, shapes.go) writes a synthetic snapshot of a
//     given shape, so benchmarks and demos take the same path as real ones.
//   - A Loader (scan.go, load.go, entry.go) validates the files, then
//     inserts them in batches, either all at once or at their original
//     arrival times sped up, on an injected Clock.
//   - Drain (drain.go) runs the real consumer until the queue is
//     empty and samples depth, oldest age and acknowledgements every second.
//   - A Report (report.go) is the summary as JSON, the timeline as CSV and
//     a chart as SVG; Compare sets two reports side by side.
//
// Replay (run.go) wires a replay together for both binaries: the production
// one against MONGODB_URI and the demo one against its embedded server.
package replay
