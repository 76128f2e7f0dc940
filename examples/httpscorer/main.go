// Command httpscorer is an external scorer for scorerefresh (SCORER_URL) in Go: the protocol of
// docs/scorers.md, the score of examples/nodescorer (two points per user_activity document at or
// before asOf plus the sum of their points). It listens on 127.0.0.1 (LISTEN sets another host,
// PORT 0 a free port) and prints "listening on http://HOST:PORT" once it accepts requests.
//
//	MONGODB_URI=mongodb://... MONGODB_DATABASE=app SCORER_TOKEN=... PORT=8080 go run ./examples/httpscorer
package main

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// score answers the protocol of docs/scorers.md.
func score(activity *mongo.Collection, token string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// Constant time, so that the answer's timing does not reveal the token.
		if token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+token)) != 1 {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		var req struct {
			Users []string  `json:"users"`
			AsOf  time.Time `json:"asOf"`
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4<<20))
		if err != nil || json.Unmarshal(body, &req) != nil || req.Users == nil || req.AsOf.IsZero() {
			http.Error(w, `want {"users": [strings], "asOf": date} within 4 MiB`, http.StatusBadRequest)
			return
		}
		var docs []struct {
			User   string        `bson:"username"`
			Points bson.RawValue `bson:"points"`
		}
		cur, err := activity.Find(r.Context(),
			bson.D{{Key: "username", Value: bson.D{{Key: "$in", Value: req.Users}}}, {Key: "at", Value: bson.D{{Key: "$lte", Value: req.AsOf}}}},
			options.Find().SetProjection(bson.D{{Key: "username", Value: 1}, {Key: "points", Value: 1}}))
		if err == nil {
			err = cur.All(r.Context(), &docs)
		}
		if err != nil {
			http.Error(w, "reading user_activity: "+err.Error(), http.StatusInternalServerError)
			return
		}
		events, points := map[string]float64{}, map[string]float64{}
		for _, d := range docs {
			p, _ := d.Points.AsFloat64OK() // missing or not a number: 0, as in the Node example
			events[d.User]++
			points[d.User] += p
		}
		scores := make(map[string]any, len(req.Users))
		for _, u := range req.Users { // a user with no activity scores 0
			scores[u] = map[string]any{"score": 2*events[u] + points[u], "components": map[string]float64{"events": events[u], "points": points[u]}}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"scores": scores, "errors": map[string]string{}})
	}
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "httpscorer:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Primary whatever the URI says: the service promises that data written
	// before asOf is there to read, which a lagging secondary breaks.
	client, err := mongo.Connect(options.Client().ApplyURI(cmp.Or(os.Getenv("MONGODB_URI"), "mongodb://localhost:27017")).SetReadPreference(readpref.Primary()))
	if err != nil {
		return fmt.Errorf("connecting to MongoDB: %w", err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	if err := client.Ping(ctx, nil); err != nil {
		return fmt.Errorf("reaching MongoDB: %w", err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cmp.Or(os.Getenv("LISTEN"), "127.0.0.1"), cmp.Or(os.Getenv("PORT"), "0")))
	if err != nil {
		return fmt.Errorf("listening: %w", err)
	}
	mux := http.NewServeMux() // any path, as the Node example; other methods get 405
	mux.Handle("POST /", score(client.Database(cmp.Or(os.Getenv("MONGODB_DATABASE"), "app")).Collection("user_activity"), os.Getenv("SCORER_TOKEN")))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	fmt.Printf("listening on http://%s\n", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	// Requests under way finish; the service retries whatever does not.
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	return nil
}
