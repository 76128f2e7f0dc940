// Command httpscorer is an external scorer for scorerefresh (SCORER_URL) in
// Go, the protocol of docs/scorers.md: a user's score is two points per
// user_activity document plus the sum of their points, at ≤ asOf. It reads
// MONGODB_URI, MONGODB_DATABASE, SCORER_TOKEN and PORT (0: any), and prints "listening on http://127.0.0.1:PORT" once it accepts requests.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func main() {
	client, err := mongo.Connect(options.Client().ApplyURI(cmp.Or(os.Getenv("MONGODB_URI"), "mongodb://localhost:27017")))
	if err != nil {
		log.Fatal(err)
	}
	activity := client.Database(cmp.Or(os.Getenv("MONGODB_DATABASE"), "app")).Collection("user_activity")
	token := os.Getenv("SCORER_TOKEN")
	ln, err := net.Listen("tcp", "127.0.0.1:"+cmp.Or(os.Getenv("PORT"), "0"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on http://%s\n", ln.Addr())
	log.Fatal(http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, `{"error":"bad token"}`, http.StatusUnauthorized)
			return
		}
		var req struct {
			Users []string  `json:"users"`
			AsOf  time.Time `json:"asOf"`
		}
		if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&req) != nil || req.AsOf.IsZero() {
			http.Error(w, `{"error":"want POST {\"users\": [strings], \"asOf\": date}"}`, http.StatusBadRequest)
			return
		}
		scores, err := score(r.Context(), activity, req.Users, req.AsOf)
		if err != nil {
			http.Error(w, fmt.Sprintf(`{"error":%q}`, err.Error()), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"scores": scores, "errors": map[string]string{}})
	})))
}

// score reads the users' activity up to asOf and scores each of them.
func score(ctx context.Context, activity *mongo.Collection, users []string, asOf time.Time) (map[string]any, error) {
	cur, err := activity.Find(ctx, bson.D{{Key: "username", Value: bson.D{{Key: "$in", Value: users}}}, {Key: "at", Value: bson.D{{Key: "$lte", Value: asOf}}}})
	if err != nil {
		return nil, err
	}
	var docs []struct {
		Username string  `bson:"username"`
		Points   float64 `bson:"points"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	events, points, out := map[string]float64{}, map[string]float64{}, map[string]any{}
	for _, d := range docs {
		events[d.Username], points[d.Username] = events[d.Username]+1, points[d.Username]+d.Points
	}
	for _, u := range users {
		out[u] = map[string]any{"score": 2*events[u] + points[u], "components": map[string]float64{"events": events[u], "points": points[u]}}
	}
	return out, nil
}
