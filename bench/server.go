package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/embedmongo"
)

// Backends the bench can run FerretDB on.
const (
	backendSQLite     = "sqlite"     // pkg/embedmongo: pushes down only {_id: x}
	backendPostgreSQL = "postgresql" // pushes down equality filters, so a user's rows are found by PostgreSQL
	backendMongoDB    = "mongodb"    // a server of one's own (-mongodb-uri): what the embedded one cannot show
)

// server is the MongoDB-compatible server every scenario runs against.
type server struct {
	Name string // what the report says it was
	URI  string // direct connection string (no proxy)
	Addr string // host:port, the proxy's target
	// viaProxy is the connection string through a proxy at the given
	// address: the server's own credentials and options, one host.
	viaProxy func(proxyAddr string) string
	close    []func()
}

func (s *server) Close() { closeAll(s.close) }

// startServer starts FerretDB on the backend asked for (on postgresql with no
// URL, over a throwaway PostgreSQL: startPostgres), or uses -mongodb-uri.
func startServer(ctx context.Context, kind, pgURL, mongoURI string) (s *server, err error) {
	switch kind {
	case backendMongoDB:
		return useMongoDB(ctx, mongoURI)
	case backendPostgreSQL:
		s, err = startOnPostgres(ctx, pgURL)
	default:
		var srv *embedmongo.Server
		if srv, err = embedmongo.Start(ctx, embedmongo.Config{}); err == nil {
			s = &server{Name: "FerretDB 1.24, SQLite handler (pkg/embedmongo, in process, data in /dev/shm)", URI: srv.URI(),
				close: []func(){func() { _ = srv.Close() }}}
		}
	}
	if err != nil {
		return nil, err
	}
	if s.Addr, s.viaProxy, err = splitMongoURI(s.URI); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func startOnPostgres(ctx context.Context, pgURL string) (*server, error) {
	s := &server{}
	version := "PostgreSQL at " + pgURL
	if u, err := url.Parse(pgURL); err == nil {
		version = "PostgreSQL at " + u.Redacted()
	}
	if pgURL == "" {
		pg, err := startPostgres(ctx)
		if err != nil {
			return nil, err
		}
		s.close = append(s.close, pg.stop)
		pgURL, version = pg.url, pg.version+" (throwaway cluster in "+pg.dir+", fsync off)"
	}
	f, err := ferretdb.New(&ferretdb.Config{Listener: ferretdb.ListenerConfig{TCP: "127.0.0.1:0"}, Handler: "postgresql",
		PostgreSQLURL: pgURL, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("starting FerretDB on PostgreSQL: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- f.Run(runCtx) }()
	s.close = append(s.close, func() { cancel(); <-done })
	s.URI = f.MongoDBURI() // blocks until the listener is bound
	s.Name = "FerretDB 1.24, PostgreSQL handler (in process) on " + version
	return s, nil
}

// useMongoDB runs the scenarios against a server of one's own. It is not
// started or stopped here; each run's database is dropped at the run's end.
func useMongoDB(ctx context.Context, uri string) (*server, error) {
	addr, via, err := splitMongoURI(uri)
	if err != nil {
		return nil, err
	}
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetTimeout(30 * time.Second))
	if err != nil {
		return nil, fmt.Errorf("connecting to -mongodb-uri: %w", err)
	}
	defer func() { _ = client.Disconnect(context.WithoutCancel(ctx)) }()
	var info struct {
		Version string `bson:"version"`
	}
	if err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil {
		return nil, fmt.Errorf("asking -mongodb-uri's server its version (buildInfo): %w", err)
	}
	return &server{Name: "MongoDB " + info.Version + " at " + addr + " (-mongodb-uri)", URI: uri, Addr: addr, viaProxy: via}, nil
}

// splitMongoURI returns a mongodb:// URI's one host and a function that
// puts another address in its place, keeping the credentials and options
// and connecting directly (the proxy forwards to one address, so the
// driver must not go looking for the replica set's other members).
func splitMongoURI(uri string) (addr string, viaProxy func(string) string, err error) {
	rest, ok := strings.CutPrefix(uri, "mongodb://")
	if !ok {
		return "", nil, errors.New("-mongodb-uri: want mongodb://[user:password@]host:port[/db][?options] (mongodb+srv names many hosts; the proxy forwards to one)")
	}
	hosts, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		hosts, tail = rest[:i], rest[i:]
	}
	userinfo := ""
	if i := strings.LastIndex(hosts, "@"); i >= 0 {
		userinfo, hosts = hosts[:i+1], hosts[i+1:]
	}
	if strings.Contains(hosts, ",") {
		return "", nil, errors.New("-mongodb-uri names several hosts: give the primary's alone (the proxy forwards to one address)")
	}
	if _, _, err := net.SplitHostPort(hosts); err != nil {
		hosts = net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(hosts, "["), "]"), "27017")
		if _, _, err := net.SplitHostPort(hosts); err != nil {
			return "", nil, errors.New("-mongodb-uri: host is not host:port")
		}
	}
	path, query, _ := strings.Cut(tail, "?")
	if path == "" {
		path = "/"
	}
	var kept []string
	for _, kv := range strings.Split(query, "&") {
		// The proxy is one host reached directly: options naming a
		// replica set or a load balancer contradict directConnection.
		key, _, _ := strings.Cut(strings.ToLower(kv), "=")
		if kv != "" && key != "directconnection" && key != "replicaset" && key != "loadbalanced" {
			kept = append(kept, kv)
		}
	}
	kept = append(kept, "directConnection=true")
	return hosts, func(proxy string) string {
		return "mongodb://" + userinfo + proxy + path + "?" + strings.Join(kept, "&")
	}, nil
}
