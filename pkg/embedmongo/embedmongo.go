// Package embedmongo runs an in-process FerretDB 1.24 (SQLite handler) on a loopback TCP port,
// so the demo and the tests need no MongoDB installed. cmd/scorerefresh does not import it:
// FerretDB and SQLite add tens of megabytes and a database engine production must never fall back to.
//
// Know its costs before measuring against it: the SQLite handler pushes down
// only a filter that is exactly {_id: <string or ObjectId>}; every other
// query decodes the whole collection in Go (about 35 µs per stored document).
package embedmongo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/FerretDB/FerretDB/ferretdb"
)

// Config configures an embedded server. The zero value is usable.
type Config struct {
	// Dir holds the SQLite files. Empty means a fresh temporary directory that
	// Close removes, in memory (/dev/shm) where possible: SQLite syncs every
	// commit, which on a disk makes inserts several times slower.
	Dir  string
	Addr string // the TCP listen address; default "127.0.0.1:0" (a free port)
}

type Server struct {
	uri     string
	cancel  context.CancelFunc
	done    chan error
	tempDir string
}

// Start starts a server and returns once it accepts connections.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	s := &Server{done: make(chan error, 1)}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("/dev/shm", "embedmongo-*")
		if err != nil { // no /dev/shm, or not writable
			d, err = os.MkdirTemp("", "embedmongo-*")
		}
		if err != nil {
			return nil, fmt.Errorf("creating data directory: %w", err)
		}
		dir, s.tempDir = d, d
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data directory %s: %w", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolving data directory %s: %w", dir, err)
	}
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: cmp.Or(cfg.Addr, "127.0.0.1:0")},
		Handler:   "sqlite",
		SQLiteURL: "file:" + abs + "/",
		// FerretDB logs every connection at info level, which would drown
		// the service's own lines.
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		os.RemoveAll(s.tempDir)
		return nil, fmt.Errorf("starting embedded FerretDB: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	go func() { s.done <- f.Run(runCtx) }()
	// MongoDBURI blocks until the listener is bound.
	s.uri = f.MongoDBURI()
	return s, nil
}

// URI is the connection string of the server, e.g. mongodb://127.0.0.1:41234/.
func (s *Server) URI() string { return s.uri }

// Close stops the server and its connections and removes a temporary data directory.
func (s *Server) Close() error {
	s.cancel()
	err := <-s.done
	return errors.Join(err, os.RemoveAll(s.tempDir)) // "" removes nothing
}
