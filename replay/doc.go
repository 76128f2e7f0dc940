// Package replay takes and replays backlog snapshots, to answer "would this
// backlog wedge us, and how long would it take to drain?" before and after a
// change, and to reproduce an incident in staging (docs/contract.md).
//
// Snapshot (snapshot.go) and Generate (generate.go) write Extended JSON files
// (what mongoexport writes) and a manifest. A Loader (scan.go, load.go,
// entry.go) validates the files, then inserts them, at once or at their
// original arrival times sped up, on an injected Clock. Drain (drain.go) runs
// the real consumer until the queue is empty, sampling it every second; a
// Report (report.go) is the summary (JSON), the timeline (CSV) and a chart
// (SVG). Replay (run.go) wires a replay together for both binaries.
package replay
