package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
}

// startServer starts FerretDB on the backend asked for (on postgresql with no
// URL, over a throwaway PostgreSQL: startPostgres), or uses -mongodb-uri;
// b.closers stop what it started.
func (b *Bench) startServer(ctx context.Context) (s *server, err error) {
	switch b.cfg.Backend {
	case backendMongoDB:
		return useMongoDB(ctx, b.cfg.MongoDB)
	case backendPostgreSQL:
		s, err = b.startOnPostgres(ctx, b.cfg.PostgreSQL)
	default:
		var srv *embedmongo.Server
		if srv, err = embedmongo.Start(ctx, embedmongo.Config{}); err == nil {
			b.closers = append(b.closers, func() { _ = srv.Close() })
			s = &server{Name: "FerretDB 1.24, SQLite handler (pkg/embedmongo, in process, data in /dev/shm)", URI: srv.URI()}
		}
	}
	if err == nil {
		s.Addr, s.viaProxy, err = splitMongoURI(s.URI)
	}
	return s, err
}

func (b *Bench) startOnPostgres(ctx context.Context, pgURL string) (*server, error) {
	version := "PostgreSQL at " + pgURL
	if u, err := url.Parse(pgURL); err == nil {
		version = "PostgreSQL at " + u.Redacted()
	}
	if pgURL == "" {
		var err error
		if pgURL, version, err = b.startPostgres(); err != nil {
			return nil, err
		}
	}
	f, err := ferretdb.New(&ferretdb.Config{Listener: ferretdb.ListenerConfig{TCP: "127.0.0.1:0"}, Handler: "postgresql",
		PostgreSQLURL: pgURL, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("starting FerretDB on PostgreSQL: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- f.Run(runCtx) }()
	b.closers = append(b.closers, func() { cancel(); <-done })
	// MongoDBURI blocks until the listener is bound.
	return &server{URI: f.MongoDBURI(), Name: "FerretDB 1.24, PostgreSQL handler (in process) on " + version}, nil
}

// useMongoDB runs the scenarios against a server of one's own, not started
// or stopped here.
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
	var info struct{ Version string } // the driver reads a field by its lowercased name
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
	u, err := url.Parse(uri)
	if err != nil { // (its message quotes the URI, password and all)
		return "", nil, errors.New("-mongodb-uri is not a URL: percent-encode the user name's and password's special characters (%XX)")
	}
	if u.Scheme != "mongodb" {
		return "", nil, errors.New("-mongodb-uri: want mongodb://[user:password@]host:port[/db][?options] (mongodb+srv names many hosts; the proxy forwards to one)")
	}
	if strings.Contains(u.Host, ",") {
		return "", nil, errors.New("-mongodb-uri names several hosts: give the primary's alone (the proxy forwards to one address)")
	}
	addr = u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "27017")
	}
	var kept []string
	for kv := range strings.SplitSeq(u.RawQuery, "&") {
		// The proxy is one host reached directly: options naming a
		// replica set or a load balancer contradict directConnection.
		key, _, _ := strings.Cut(strings.ToLower(kv), "=")
		if kv != "" && key != "directconnection" && key != "replicaset" && key != "loadbalanced" {
			kept = append(kept, kv)
		}
	}
	u.Path, u.RawQuery = cmp.Or(u.Path, "/"), strings.Join(append(kept, "directConnection=true"), "&")
	return addr, func(proxy string) string {
		via := *u
		via.Host = proxy
		return via.String()
	}, nil
}

// pgMaxConnections is the throwaway cluster's max_connections, all but 100
// of them FerretDB's pool. FerretDB 1.24 holds N+1 connections for an update
// of N documents by _id until the command ends; the consumer sends those for
// whole groups of users, so the default pool of 50 runs dry (which hangs
// every command) with MAX_USERS_IN_FLIGHT in the hundreds.
const pgMaxConnections = 800

// startPostgres runs a throwaway cluster with initdb and pg_ctl from PATH (or
// Debian's /usr/lib/postgresql/*/bin) under /dev/shm on a free loopback port,
// durability off (a benchmark of the consumer, not the disk), as "postgres"
// when root (PostgreSQL refuses root); b.closers stop it and remove its files.
func (b *Bench) startPostgres() (pgURL, version string, err error) {
	bin, err := postgresBin()
	if err != nil {
		return "", "", err
	}
	root := os.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		root = "/dev/shm"
	}
	dir, err := os.MkdirTemp(root, "scorerefresh-bench-pg-*")
	if err != nil {
		return "", "", err
	}
	b.closers = append(b.closers, func() { os.RemoveAll(dir) })
	cred, err := postgresUser(dir)
	if err != nil {
		return "", "", err
	}
	command := func(name string, args ...string) error {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Dir, cmd.SysProcAttr = dir, &syscall.SysProcAttr{Credential: cred, Setpgid: true}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", name, err, out)
		}
		return nil
	}
	data := filepath.Join(dir, "data")
	if err := command("initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"); err != nil {
		return "", "", err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0") // a free port
	if err != nil {
		return "", "", err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	b.closers = append(b.closers, func() {
		if command("pg_ctl", "stop", "-D", data, "-m", "fast", "-w") != nil {
			_ = command("pg_ctl", "stop", "-D", data, "-m", "immediate")
		}
	})
	// -w: pg_ctl returns once the server accepts logins (at most -t seconds).
	if err := command("pg_ctl", "start", "-w", "-t", "30", "-D", data, "-l", filepath.Join(dir, "postgres.log"), "-o",
		fmt.Sprintf("-k %s -h 127.0.0.1 -p %d -c max_connections=%d -c shared_buffers=256MB ", dir, port, pgMaxConnections)+
			"-c fsync=off -c synchronous_commit=off -c full_page_writes=off"); err != nil {
		return "", "", err
	}
	version = "PostgreSQL"
	if out, err := exec.Command(filepath.Join(bin, "postgres"), "--version").Output(); err == nil {
		version += " " + strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "postgres (PostgreSQL) "))
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?pool_max_conns=%d", port, pgMaxConnections-100),
		version + " (throwaway cluster in " + dir + ", fsync off)", nil
}

// postgresUser is who PostgreSQL runs as: this process (nil), or the
// "postgres" user, owning dir, when this process is root.
func postgresUser(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err = os.Chown(dir, uid, gid); err == nil {
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
		}
	}
	return nil, fmt.Errorf("running as root, PostgreSQL runs as the postgres user: %w", err)
}

func postgresBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if p, err = filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(p), nil
		}
	}
	if matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres"); len(matches) > 0 {
		return filepath.Dir(matches[len(matches)-1]), nil
	}
	return "", errors.New("no initdb, pg_ctl and postgres binaries found (Debian: apt-get install postgresql)")
}
