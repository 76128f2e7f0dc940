package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
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
	close    []func()
}

func (s *server) Close() {
	for i := len(s.close) - 1; i >= 0; i-- {
		s.close[i]()
	}
}

// startServer starts FerretDB on the backend asked for. With postgresql and
// no URL, it starts a throwaway PostgreSQL from the binaries on this machine
// (initdb, postgres) in memory.
func startServer(ctx context.Context, kind, pgURL, mongoURI string) (*server, error) {
	switch kind {
	case backendMongoDB:
		return useMongoDB(ctx, mongoURI)
	case backendPostgreSQL:
		return startOnPostgres(ctx, pgURL)
	}
	return startSQLite(ctx)
}

func startSQLite(ctx context.Context) (*server, error) {
	srv, err := embedmongo.Start(ctx, embedmongo.Config{})
	if err != nil {
		return nil, err
	}
	s := &server{Name: "FerretDB 1.24, SQLite handler (pkg/embedmongo, in process, data in /dev/shm)", URI: srv.URI()}
	s.close = append(s.close, func() { _ = srv.Close() })
	s.Addr, err = hostPort(srv.URI())
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func startOnPostgres(ctx context.Context, pgURL string) (*server, error) {
	s := &server{}
	version := "PostgreSQL at " + redactPG(pgURL)
	if pgURL == "" {
		pg, err := startPostgres(ctx)
		if err != nil {
			return nil, err
		}
		s.close = append(s.close, pg.stop)
		pgURL, version = pg.url, pg.version+" (throwaway cluster in "+pg.dir+", fsync off)"
	}
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:      ferretdb.ListenerConfig{TCP: "127.0.0.1:0"},
		Handler:       "postgresql",
		PostgreSQLURL: pgURL,
		Logger:        slog.New(slog.DiscardHandler),
	})
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
	if s.Addr, err = hostPort(s.URI); err != nil {
		s.Close()
		return nil, err
	}
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

// uriVia is the server's connection string through the proxy at addr.
func (s *server) uriVia(addr string) string {
	if s.viaProxy != nil {
		return s.viaProxy(addr)
	}
	return "mongodb://" + addr + "/?directConnection=true"
}

func hostPort(uri string) (string, error) {
	rest, ok := strings.CutPrefix(uri, "mongodb://")
	if !ok {
		return "", fmt.Errorf("unexpected server URI %q", uri)
	}
	hp, _, _ := strings.Cut(rest, "/")
	if _, _, err := net.SplitHostPort(hp); err != nil {
		return "", fmt.Errorf("server URI %q: %w", uri, err)
	}
	return hp, nil
}

func redactPG(u string) string {
	if i := strings.Index(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "…" + u[i:]
		}
	}
	return u
}

// pgMaxConnections is the throwaway cluster's max_connections: FerretDB's
// pool gets all but 100 of them (see startPostgres).
const pgMaxConnections = 800

// postgres is a throwaway PostgreSQL cluster started for one bench run.
type postgres struct {
	url, dir, version string
	stop              func()
}

// startPostgres runs initdb and postgres from PATH (or Debian's
// /usr/lib/postgresql/*/bin) in a fresh directory under /dev/shm, on a free
// loopback port, with durability off: a benchmark of the consumer, not of
// the disk. PostgreSQL refuses to run as root, so as root it runs as the
// "postgres" user.
func startPostgres(ctx context.Context) (*postgres, error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	c, err := newPGCluster(bin)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(c.dir, "data")
	if out, err := c.command(ctx, "initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8").CombinedOutput(); err != nil {
		os.RemoveAll(c.dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(c.dir)
		return nil, err
	}
	stop, exited, _, err := c.startServer(ctx, data, port)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := awaitPort(addr, exited); err != nil {
		stop()
		return nil, err
	}
	// PostgreSQL accepts TCP slightly before it accepts logins; FerretDB's
	// pool retries, so a short pause is enough.
	time.Sleep(500 * time.Millisecond)
	// FerretDB 1.24 keeps one PostgreSQL connection per matching statement
	// of an update command until the command ends, and takes one more for
	// each write: an update of N documents by _id needs N+1 connections at
	// once. The consumer sends such updates for a whole group of users
	// (start marks, batched score writes), so its default pool of 50 runs
	// dry with MAX_USERS_IN_FLIGHT in the hundreds, and a dry pool hangs
	// every command for good. The cluster allows pgMaxConnections.
	return &postgres{url: fmt.Sprintf("postgres://postgres@%s/postgres?pool_max_conns=%d", addr, pgMaxConnections-100), dir: c.dir,
		version: postgresVersion(bin), stop: stop}, nil
}

// pgCluster is where a throwaway cluster's commands run: its binaries,
// its directory and the user they run as (nil: this process's).
type pgCluster struct {
	bin, dir string
	cred     *syscall.Credential
}

// newPGCluster makes the cluster's directory, under /dev/shm if there is
// one, owned by the postgres user when this process is root.
func newPGCluster(bin string) (*pgCluster, error) {
	root := os.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		root = "/dev/shm"
	}
	dir, err := os.MkdirTemp(root, "scorerefresh-bench-pg-*")
	if err != nil {
		return nil, err
	}
	c := &pgCluster{bin: bin, dir: dir}
	if os.Geteuid() != 0 {
		return c, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("running as root and there is no postgres user to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if err := os.Chown(dir, uid, gid); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

func (c *pgCluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
	return cmd
}

// startServer starts postgres on data and port, logging to the cluster's
// directory; stop ends it and removes the directory, exited reports its end.
func (c *pgCluster) startServer(ctx context.Context, data string, port int) (stop func(), exited chan error, pid int, err error) {
	logFile, err := os.Create(filepath.Join(c.dir, "postgres.log"))
	if err != nil {
		os.RemoveAll(c.dir)
		return nil, nil, 0, err
	}
	pg := c.command(ctx, "postgres", "-D", data, "-k", c.dir, "-h", "127.0.0.1", "-p", strconv.Itoa(port),
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", fmt.Sprintf("max_connections=%d", pgMaxConnections), "-c", "shared_buffers=256MB")
	pg.Stdout, pg.Stderr = logFile, logFile
	pg.Cancel = func() error { return pg.Process.Signal(syscall.SIGINT) } // fast shutdown
	pg.WaitDelay = 10 * time.Second
	if err := pg.Start(); err != nil {
		logFile.Close()
		os.RemoveAll(c.dir)
		return nil, nil, 0, fmt.Errorf("starting postgres: %w", err)
	}
	exited = make(chan error, 1)
	go func() { exited <- pg.Wait() }()
	stop = func() {
		_ = pg.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = pg.Process.Kill()
			<-exited
		}
		logFile.Close()
		os.RemoveAll(c.dir)
	}
	return stop, exited, pg.Process.Pid, nil
}

// awaitPort waits up to 30 s for addr to accept connections, unless the
// server exits first (exited keeps its error for whoever reads it next).
func awaitPort(addr string, exited chan error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("postgres exited at start: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("postgres did not accept connections within 30s")
		}
	}
}

// postgresVersion is "PostgreSQL" and the version the binary reports.
func postgresVersion(bin string) string {
	version := "PostgreSQL"
	if out, err := exec.Command(filepath.Join(bin, "postgres"), "--version").Output(); err == nil {
		version = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "postgres (PostgreSQL) "))
		version = "PostgreSQL " + version
	}
	return version
}

func postgresBin() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				return filepath.Dir(r), nil
			}
			return filepath.Dir(p), nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(matches) > 0 {
		return filepath.Dir(matches[len(matches)-1]), nil
	}
	return "", errors.New("no postgres and initdb binaries found (Debian: apt-get install postgresql)")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
