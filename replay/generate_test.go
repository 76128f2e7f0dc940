package replay

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/extjson"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// userCounts reads a generated queue file: entries per user.
func userCounts(t *testing.T, path string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	err := eachDocument(context.Background(), path, nil, func(raw []byte, bad *extjson.Error) error {
		if bad != nil {
			t.Fatal(bad)
		}
		user, _ := QueueEntry(raw)
		counts[user]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return counts
}

func TestGenerateIsReproducible(t *testing.T) {
	t.Parallel()
	end := time.Date(2025, 6, 1, 8, 0, 0, 0, time.UTC)
	a, b := t.TempDir(), t.TempDir()
	for _, dir := range []string{a, b} {
		if _, err := Generate(GenerateConfig{Shape: ShapeMixed, Entries: 500, Users: 50, Seed: 7, End: end, Out: dir}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"score_events.json", "user_activity.json", ManifestName} {
		x, _ := os.ReadFile(filepath.Join(a, name))
		y, _ := os.ReadFile(filepath.Join(b, name))
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("%s differs between two runs with one seed (or is empty)", name)
		}
	}
}

func TestShapes(t *testing.T) {
	t.Parallel()
	tests := map[Shape]func(counts map[string]int) bool{
		// Nine entries in ten for the firehose user.
		ShapeFirehose: func(c map[string]int) bool { return c[userName(0)] > 850 && c[userName(0)] < 950 },
		// Uniform: nearly every one of 200 users, none dominant.
		ShapeDiverse: func(c map[string]int) bool { return len(c) > 190 && c[userName(0)] < 30 },
		// A hot head and a long tail.
		ShapeZipf: func(c map[string]int) bool { return c[userName(0)] > 200 && len(c) > 50 },
		// The firehose's 40% plus Zipf's share of user 0, and a wide tail.
		ShapeMixed: func(c map[string]int) bool { return c[userName(0)] > 400 && len(c) > 150 },
	}
	for shape, ok := range tests {
		dir := t.TempDir()
		if _, err := Generate(GenerateConfig{Shape: shape, Entries: 1000, Users: 200, Out: dir}); err != nil {
			t.Fatal(err)
		}
		if c := userCounts(t, filepath.Join(dir, "score_events.json")); !ok(c) {
			t.Errorf("%s: %d users, %d entries for the first", shape, len(c), c[userName(0)])
		}
	}
}

func TestGeneratedSourcesFollowTheRules(t *testing.T) {
	t.Parallel()
	rules, err := scoring.ParseRules("rules.yaml", []byte(`components:
  - {name: likes, collection: likes, userField: owner, op: sum, field: n, window: 48h, timeField: likedAt}
  - {name: best, collection: likes, userField: owner, op: max, field: stars}
  - {name: posts, collection: posts, userField: author, op: count}
  - {name: tags, collection: posts, userField: author, op: distinct, field: tag}
`))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	end := time.Date(2025, 6, 1, 8, 0, 0, 0, time.UTC)
	m, err := Generate(GenerateConfig{Shape: ShapeZipf, Entries: 300, Users: 1000, Rules: rules, End: end, Out: dir, Gzip: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != 3 || m.Files[1].File != "likes.json.gz" || m.Files[2].Collection != "posts" || m.Rules != "rules.yaml" {
		t.Fatalf("manifest %+v", m)
	}
	queued := userCounts(t, filepath.Join(dir, "score_events.json.gz"))
	for _, f := range m.Files[1:] {
		seen := map[string]bool{}
		err := eachDocument(context.Background(), filepath.Join(dir, f.File), nil, func(raw []byte, _ *extjson.Error) error {
			var d struct {
				Owner   string    `bson:"owner"`
				Author  string    `bson:"author"`
				N       *int32    `bson:"n"`
				Stars   *int32    `bson:"stars"`
				Tag     *string   `bson:"tag"`
				LikedAt time.Time `bson:"likedAt"`
			}
			if err := bson.Unmarshal(raw, &d); err != nil {
				return err
			}
			user := d.Owner + d.Author
			seen[user] = true
			switch f.Collection {
			case "likes":
				if d.N == nil || d.Stars == nil || end.Sub(d.LikedAt) > 24*time.Hour || d.LikedAt.After(end) {
					t.Errorf("likes document %s lacks n or stars, or likedAt %s is outside the window", raw, d.LikedAt)
				}
			case "posts":
				if d.Tag == nil {
					t.Errorf("posts document %s lacks tag", raw)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(seen) != len(queued) {
			t.Errorf("%s: documents for %d users, the queue names %d", f.Collection, len(seen), len(queued))
		}
		for u := range seen {
			if queued[u] == 0 {
				t.Errorf("%s: documents for %s, whom the queue never names", f.Collection, u)
			}
		}
	}
}
