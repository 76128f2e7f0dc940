package replay

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolveInput(t *testing.T) {
	t.Parallel()
	touch := func(dir string, names ...string) string {
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	file := touch(t.TempDir(), "export.json")
	got, _, err := ResolveInput(filepath.Join(file, "export.json"), "q")
	if err != nil || len(got) != 1 || !got[0].Queue {
		t.Errorf("a file: %+v %v", got, err)
	}
	// mongoexport files named after their collections.
	dir := touch(t.TempDir(), "q.json.gz", "user_activity.jsonl", "posts.ndjson", "notes.txt")
	got, _, err = ResolveInput(dir, "q")
	if err != nil || len(got) != 3 {
		t.Fatalf("a directory: %+v %v", got, err)
	}
	for _, f := range got {
		if f.Queue != (f.Collection == "q") || strings.Contains(f.Collection, ".") {
			t.Errorf("%+v", f)
		}
	}
	if _, _, err := ResolveInput(dir, "other_queue"); err == nil || !strings.Contains(err.Error(), "0 files hold the queue") {
		t.Errorf("no queue file: %v", err)
	}
	// A manifest says which file is the queue, whatever QUEUE_COLLECTION is.
	snap := touch(t.TempDir(), "events.json", "user_activity.json")
	if err := writeManifest(snap, &Manifest{Format: ManifestFormat, Files: []ManifestFile{
		{File: "events.json", Collection: "events", Queue: true}, {File: "user_activity.json", Collection: "user_activity"}}}); err != nil {
		t.Fatal(err)
	}
	got, _, err = ResolveInput(snap, "score_events")
	if err != nil || len(got) != 2 || !got[0].Queue || got[1].Collection != "user_activity" {
		t.Errorf("with a manifest: %+v %v", got, err)
	}
}
