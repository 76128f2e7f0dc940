package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pgMaxConnections is the throwaway cluster's max_connections, all but 100
// of them FerretDB's pool. FerretDB 1.24 holds a connection per matching
// statement of an update until the command ends, and one more per write: an
// update of N documents by _id needs N+1 at once. The consumer sends those for
// whole groups of users, so the default pool of 50 runs dry with
// MAX_USERS_IN_FLIGHT in the hundreds, and a dry pool hangs every command.
const pgMaxConnections = 800

// postgres is a throwaway PostgreSQL cluster started for one bench run.
type postgres struct {
	url, dir, version string
	stop              func()
}

// startPostgres runs initdb and postgres from PATH (or Debian's
// /usr/lib/postgresql/*/bin) under /dev/shm on a free loopback port, durability
// off (a benchmark of the consumer, not the disk); as root, as the "postgres"
// user, since PostgreSQL refuses root. pg.stop ends it and removes its files.
func startPostgres(ctx context.Context) (_ *postgres, err error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	root := os.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		root = "/dev/shm"
	}
	dir, err := os.MkdirTemp(root, "scorerefresh-bench-pg-*")
	if err != nil {
		return nil, err
	}
	pg := &postgres{dir: dir, stop: func() { os.RemoveAll(dir) }}
	defer func() {
		if err != nil {
			pg.stop()
		}
	}()
	var cred *syscall.Credential // nil: this process's
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err == nil {
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			cred, err = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, os.Chown(dir, uid, gid)
		}
		if err != nil {
			return nil, fmt.Errorf("running as root, PostgreSQL runs as the postgres user: %w", err)
		}
	}
	command := func(name string, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
		cmd.Dir, cmd.SysProcAttr = dir, &syscall.SysProcAttr{Credential: cred, Setpgid: true}
		return cmd
	}
	data := filepath.Join(dir, "data")
	if out, err := command("initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0") // a free port
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	logFile, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return nil, err
	}
	cmd := command("postgres", "-D", data, "-k", dir, "-h", "127.0.0.1", "-p", port,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", fmt.Sprintf("max_connections=%d", pgMaxConnections), "-c", "shared_buffers=256MB")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) } // fast shutdown
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting postgres: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pg.stop = func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
		os.RemoveAll(dir)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			// PostgreSQL accepts TCP slightly before it accepts logins;
			// FerretDB's pool retries, so a short pause is enough.
			time.Sleep(500 * time.Millisecond)
			break
		}
		select {
		case err := <-exited:
			exited <- err
			return nil, fmt.Errorf("postgres exited at start: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, errors.New("postgres did not accept connections within 30s")
		}
	}
	pg.url = fmt.Sprintf("postgres://postgres@%s/postgres?pool_max_conns=%d", addr, pgMaxConnections-100)
	pg.version = "PostgreSQL"
	if out, err := exec.Command(filepath.Join(bin, "postgres"), "--version").Output(); err == nil {
		pg.version += " " + strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "postgres (PostgreSQL) "))
	}
	return pg, nil
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
	return "", errors.New("no postgres and initdb binaries found (Debian: apt-get install postgresql)")
}
