package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/internal/config"
)

// TestServeKeepsTheSeededServerUp: serve prints the URI of a server that
// holds the demo's backlog, keeps it up until interrupted, and stops
// cleanly; -h answers with the usage and starts nothing.
func TestServeKeepsTheSeededServerUp(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if code := runServe([]string{"-h"}, nil, &out, io.Discard); code != 0 || !strings.Contains(out.String(), "usage: scorerefresh-demo serve") {
		t.Fatalf("-h: exit %d, %q", code, out.String())
	}
	cfg := config.Defaults()
	ctx, cancel := context.WithCancel(t.Context())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, cfg, demoOptions{entries: 50, users: 10, firehose: 0.5, seed: 1}, "127.0.0.1:0", w)
		w.Close()
	}()
	lines := bufio.NewScanner(r)
	var uri string
	for lines.Scan() {
		if u, ok := strings.CutPrefix(lines.Text(), "MONGODB_URI="); ok {
			uri = u
			break
		}
	}
	if uri == "" {
		cancel()
		t.Fatalf("serve printed no MONGODB_URI: %v", <-done)
	}
	go func() { _, _ = io.Copy(io.Discard, r) }()
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetTimeout(30 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	n, err := client.Database(cfg.Database).Collection(cfg.QueueCollection).CountDocuments(t.Context(), bson.D{})
	if err != nil || n != 50 {
		t.Errorf("the served queue holds %d entries (%v), want the 50 seeded", n, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve after the interrupt: %v", err)
	}
}
