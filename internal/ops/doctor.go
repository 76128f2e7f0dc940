package ops

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/scoring"
)

// Check levels.
const (
	OK   = "ok"
	Warn = "warn"
	Fail = "fail"
)

// Check is one line of the doctor's table.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok | warn | fail
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// DoctorReport is `doctor --json`.
type DoctorReport struct {
	SchemaVersion int       `json:"schemaVersion"`
	Kind          string    `json:"kind"` // "doctor"
	At            time.Time `json:"at"`
	Database      string    `json:"database"`
	Checks        []Check   `json:"checks"`
	OK            int       `json:"ok"`
	Warnings      int       `json:"warnings"`
	Failures      int       `json:"failures"`
}

func (r *DoctorReport) add(c Check) {
	r.Checks = append(r.Checks, c)
	switch c.Status {
	case OK:
		r.OK++
	case Warn:
		r.Warnings++
	default:
		r.Failures++
	}
}

// DoctorConfig is what the doctor checks the server against.
type DoctorConfig struct {
	Colls         Collections
	Rules         *scoring.Rules
	Replicas      int // the fleet's size; one more is counted for a rollout's surge pod
	PoolSize      int // one replica's maxPoolSize
	PerReplica    int // connections one replica may open to one server: pool + monitoring
	ClaimWindow   int
	LeaseDuration time.Duration
}

// Doctor runs every check against the configured server. It never changes
// anything: its probes are reads, explains and a change stream opened and
// closed at once. Checks the server cannot answer (the embedded FerretDB
// has no explain plans, privileges or connection figures) are warnings.
func Doctor(ctx context.Context, cfg DoctorConfig) *DoctorReport {
	r := &DoctorReport{SchemaVersion: SchemaVersion, Kind: "doctor", At: time.Now(), Database: cfg.Colls.DB.Name()}
	info, err := readServerInfo(ctx, cfg.Colls.DB)
	if err != nil {
		r.add(Check{Name: "reachable", Status: Fail, Detail: err.Error(),
			Fix: "check MONGODB_URI (host, credentials, TLS), the network path from here (DNS, firewall, Atlas IP access list)"})
		return r
	}
	r.add(Check{Name: "reachable", Status: OK, Detail: fmt.Sprintf("ping answered in %.1f ms", float64(info.rtt.Microseconds())/1000)})
	r.add(versionCheck(info))
	r.add(topologyCheck(info))
	r.add(changeStreamCheck(ctx, cfg.Colls))
	r.add(clockCheck(ctx, cfg))
	r.add(connectionsCheck(ctx, cfg))
	names, err := cfg.Colls.DB.ListCollectionNames(ctx, bson.D{})
	if err != nil {
		r.add(Check{Name: "collections", Status: Fail, Detail: fmt.Sprintf("listing the collections of %s: %v", cfg.Colls.DB.Name(), err),
			Fix: "grant listCollections on the database (readWrite includes it)"})
		return r
	}
	ix := &indexCache{db: cfg.Colls.DB, exists: map[string]bool{}, byColl: map[string][]indexInfo{}}
	for _, n := range names {
		ix.exists[n] = true
	}
	for _, checks := range [][]Check{indexChecks(ctx, cfg, ix), planChecks(ctx, cfg, ix, info), sourceChecks(ctx, cfg, ix), privilegeChecks(ctx, cfg)} {
		for _, c := range checks {
			r.add(c)
		}
	}
	return r
}

// WriteDoctor prints the report as a table, each fix under its check.
func WriteDoctor(w io.Writer, r *DoctorReport) error {
	p := &printer{w: w}
	p.f("scorerefresh doctor: database %s\n\n", r.Database)
	tw := p.table()
	fmt.Fprintf(tw, "STATUS\tCHECK\tDETAIL\n")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Status, c.Name, c.Detail)
		if c.Fix != "" && c.Status != OK {
			fmt.Fprintf(tw, "\t\tfix: %s\n", c.Fix)
		}
	}
	p.flush(tw)
	p.f("\n%d ok, %d warnings, %d failures\n", r.OK, r.Warnings, r.Failures)
	return p.err
}
