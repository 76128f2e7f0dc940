package replay

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReadQueueHandsOverUsersAndTimesAsTheConsumerReadsThem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.json")
	lines := []string{
		`{"_id": {"$oid": "65f000000000000000000001"}, "username": "ann", "createdAt": {"$date": "2026-01-01T00:00:10Z"}}`,
		`{"_id": {"$oid": "65f000010000000000000002"}, "username": "bob"}`, // dated by its ObjectId
		`{"_id": 3, "username": "cy"}`,                               // no time at all: malformed
		`{"_id": 4, "createdAt": {"$date": "2026-01-01T00:00:20Z"}}`, // no user: malformed
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var users []string
	var times []time.Time
	scan, err := ReadQueue(context.Background(), path, "score_events", false, func(u string, at time.Time) {
		users, times = append(users, u), append(times, at)
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(users, ",") != "ann,bob" || scan.Entries != 2 || scan.Malformed != 2 {
		t.Errorf("users %v, %d entries, %d malformed; want ann,bob, 2 and 2", users, scan.Entries, scan.Malformed)
	}
	oid := time.Unix(0x65f00001, 0)
	if !times[1].Equal(oid) {
		t.Errorf("bob's time %v, want the ObjectId's %v", times[1], oid)
	}
	// Without a manifest, ages count from the newest entry (ann's).
	if newest := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC); !scan.Reference.Equal(newest) {
		t.Errorf("reference %v, want the newest entry's time %v", scan.Reference, newest)
	}
}

func TestReadQueueOfASnapshotCountsFromItsManifest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "snap")
	end := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if _, err := Generate(GenerateConfig{Shape: ShapeZipf, Entries: 50, Users: 10, Seed: 1, End: end, Out: dir}); err != nil {
		t.Fatal(err)
	}
	n := 0
	scan, err := ReadQueue(context.Background(), dir, "score_events", false, func(string, time.Time) { n++ })
	if err != nil {
		t.Fatal(err)
	}
	if n != 50 || !scan.Reference.Equal(end) || filepath.Base(scan.Path) != "score_events.json" {
		t.Errorf("%d entries, reference %v, file %s; want 50, %v, score_events.json", n, scan.Reference, scan.Path, end)
	}
}
