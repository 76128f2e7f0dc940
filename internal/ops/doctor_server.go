package ops

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// serverInfo is what hello and buildInfo say (asked through the traits
// the service uses, so the doctor reads the server exactly as the service
// does), with ping's round trip, read once for several checks.
type serverInfo struct {
	rtt    time.Duration
	traits *servertraits.Traits
	servertraits.Info
}

func readServerInfo(ctx context.Context, db *mongo.Database) (*serverInfo, error) {
	start := time.Now()
	if err := db.Client().Ping(ctx, nil); err != nil {
		return nil, fmt.Errorf("ping: %w", err)
	}
	info := &serverInfo{rtt: time.Since(start), traits: servertraits.New()}
	if err := info.traits.Probe(ctx, db.Client().Database("admin")); err != nil {
		return nil, err
	}
	info.Info = info.traits.Info()
	return info, nil
}

func versionCheck(info *serverInfo) Check {
	if info.FerretDB != "" {
		return Check{Name: "server version", Status: Warn,
			Detail: fmt.Sprintf("FerretDB, version %s (reports MongoDB %s): the embedded or development server, which lacks change streams, TTL and partial indexes and query plans", info.FerretDB, info.Version),
			Fix:    "fine for the demo and tests; production runs on MongoDB 6.0 or later"}
	}
	parts := strings.SplitN(info.Version, ".", 3)
	major, _ := strconv.Atoi(parts[0])
	minor := 0
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[1])
	}
	if major > 6 || (major == 6 && minor >= 0) {
		return Check{Name: "server version", Status: OK, Detail: "MongoDB " + info.Version}
	}
	return Check{Name: "server version", Status: Warn, Detail: fmt.Sprintf("MongoDB %s: older than 6.0, the oldest version this service is built and tested for", info.Version),
		Fix: "upgrade the server to 6.0 or later"}
}

func topologyCheck(info *serverInfo) Check {
	c := Check{Name: "topology"}
	switch h := info.Info; {
	case h.Sharded:
		c.Status, c.Detail = OK, "sharded cluster (through mongos): change streams available"
	case h.SetName != "" && !h.WritablePrimary:
		c.Status, c.Detail = Fail, fmt.Sprintf("replica set %s, but connected to a member that is not the primary (primary: %s): writes fail", h.SetName, h.Primary)
		c.Fix = "let MONGODB_URI name the replica set (replicaSet=…, or mongodb+srv://) instead of one member with directConnection=true"
	case h.SetName != "":
		c.Status, c.Detail = OK, fmt.Sprintf("replica set %s, primary %s: change streams available", h.SetName, h.Primary)
	default:
		c.Status, c.Detail = Warn, "standalone server: no change streams (the consumer polls every POLL_INTERVAL) and no retryable writes"
		c.Fix = "run MongoDB as a replica set (a single-node set will do) or use Atlas"
	}
	return c
}

func changeStreamCheck(ctx context.Context, colls Collections) Check {
	if consumer.DetectChangeStreams(ctx, colls.Queue) {
		return Check{Name: "change streams", Status: OK, Detail: "a change stream on " + colls.Queue.Name() + " opens: new entries wake the consumer at once"}
	}
	return Check{Name: "change streams", Status: Warn,
		Detail: "a change stream on " + colls.Queue.Name() + " does not open: the consumer polls every POLL_INTERVAL instead (up to that much extra latency)",
		Fix:    "a replica set or sharded cluster, and the changeStream and find actions on the queue"}
}

// clockCheck compares this host's clock with the server's. Replicas write
// lease expiries by their own clocks and compare them with the same clocks,
// so hosts whose clocks disagree by a good part of LEASE_DURATION take live
// leases over early (a duplicate refresh) or hold backoffs long.
func clockCheck(ctx context.Context, cfg DoctorConfig) Check {
	c := Check{Name: "clock"}
	server, local, rtt, err := ServerTime(ctx, cfg.Colls.DB)
	if err != nil {
		c.Status, c.Detail = Warn, err.Error()
	} else {
		c.Status, c.Detail, c.Fix = clockVerdict(server.Sub(local), rtt, cfg.LeaseDuration)
	}
	return c
}

func clockVerdict(skew, rtt, lease time.Duration) (status, detail, fix string) {
	// hello.localTime has millisecond precision and was read somewhere in the
	// round trip: that much of the difference is measurement.
	slack := rtt/2 + time.Millisecond
	off := max(0, skew.Abs()-slack)
	detail = fmt.Sprintf("this host's clock is %s %s the server's (±%s)", skew.Abs().Round(time.Millisecond), map[bool]string{true: "behind", false: "ahead of"}[skew > 0], slack.Round(time.Millisecond))
	switch {
	case off < 2*time.Second:
		return OK, detail, ""
	case off < lease/2:
		return Warn, detail + fmt.Sprintf("; replicas use their own clocks for leases (LEASE_DURATION %s)", lease), "synchronise the clocks (NTP: chrony or systemd-timesyncd) on the replicas' hosts"
	}
	return Fail, detail + fmt.Sprintf(": at least half of LEASE_DURATION (%s), so live leases may be taken over early and backoffs held too long", lease),
		"synchronise the clocks (NTP: chrony or systemd-timesyncd) on the replicas' hosts before deploying"
}

// connectionsCheck compares what the fleet may open with what the server
// reports (serverStatus.connections), where it is visible.
func connectionsCheck(ctx context.Context, cfg DoctorConfig) Check {
	c := Check{Name: "connections"}
	need := (cfg.Replicas + 1) * cfg.PerReplica
	raw, err := cfg.Colls.DB.Client().Database("admin").RunCommand(ctx, bson.D{{Key: "serverStatus", Value: 1}}).Raw()
	var ce mongo.CommandError
	switch {
	case errors.As(err, &ce) && ce.HasErrorCode(13): // Unauthorized
		c.Status, c.Detail = Warn, fmt.Sprintf("the fleet may open %d; the server's figures are not visible to this user (serverStatus)", need)
		c.Fix = "check the limit in the provider's console (Atlas publishes it per tier), or grant clusterMonitor to see it here"
	case err != nil:
		c.Status, c.Detail = Warn, fmt.Sprintf("the fleet may open %d; serverStatus failed: %v", need, err)
	default:
		current, available, ok := parseConnections(raw)
		if !ok {
			c.Status, c.Detail = Warn, fmt.Sprintf("the fleet may open %d; this server does not report its connections", need)
		} else {
			c.Status, c.Detail, c.Fix = connectionVerdict(need, cfg, current, available)
		}
	}
	return c
}

// parseConnections reads serverStatus.connections: ok is false when either
// figure is missing or not a number.
func parseConnections(raw bson.Raw) (current, available int64, ok bool) {
	conns, isDoc := raw.Lookup("connections").DocumentOK()
	if !isDoc {
		return 0, 0, false
	}
	current, okC := conns.Lookup("current").AsInt64OK()
	available, okA := conns.Lookup("available").AsInt64OK()
	return current, available, okC && okA
}

func connectionVerdict(need int, cfg DoctorConfig, current, available int64) (status, detail, fix string) {
	limit := current + available
	detail = fmt.Sprintf("the fleet may open %d: (%d replicas + 1 during a rollout) × (pool %d + 2 monitoring); the server allows %d (%d in use, %d free)",
		need, cfg.Replicas, cfg.PoolSize, limit, current, available)
	fix = "lower REFRESH_CONCURRENCY or the replica count, or raise the server's connection limit (a larger tier)"
	switch {
	case int64(need) > limit:
		return Fail, detail, fix
	case int64(need) > available:
		return Warn, detail + "; more than are free now (if the fleet already runs, its connections are among those in use)", fix
	}
	return OK, detail, ""
}
