package app

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// TestBootRefusesFiltersTheServerMisreads boots the service on the embedded
// server (FerretDB, which gets $elemMatch wrong) with rules whose second
// component's filter uses $elemMatch: New refuses them, naming the file, the
// component and the operator. The same rules boot where the server is
// MongoDB, and a filter without $elemMatch boots on FerretDB.
func TestBootRefusesFiltersTheServerMisreads(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	info, err := servertraits.Ask(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	if info.FerretDB == "" {
		t.Skip("TEST_MONGODB_URI is a MongoDB, which evaluates $elemMatch as documented")
	}
	const plain = "  - {name: plain, collection: user_activity, op: count, filter: {kind: {$in: [post, reply]}}}\n"
	const tagged = "  - {name: tagged, collection: user_activity, op: count, filter: {$or: [{kind: post}, {tags: {$elemMatch: {$in: [go, db]}}}]}}\n"
	boot := func(t *testing.T, rules string, traits *servertraits.Traits) (string, error) {
		path := filepath.Join(t.TempDir(), "rules.yaml")
		if err := os.WriteFile(path, []byte("components:\n"+rules), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Parse([]string{"MONGODB_URI=" + mongotest.URI(t), "MONGODB_DATABASE=" + db.Name(), "SCORING_RULES=" + path, "METRICS_ADDR=127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		svc, err := New(t.Context(), cfg, Options{Traits: traits})
		if err == nil {
			_ = svc.Close(t.Context())
		}
		return path, err
	}

	path, err := boot(t, plain+tagged, nil)
	var re *scoring.RulesError
	if !errors.As(err, &re) || len(re.Problems) != 1 {
		t.Fatalf("booting with $elemMatch on FerretDB: %v, want one rules problem", err)
	}
	for _, want := range []string{path, `component 2 ("tagged")`, "$elemMatch", "FerretDB " + info.FerretDB} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not name %q", err, want)
		}
	}
	if _, err := boot(t, plain+tagged, servertraits.Fixed(servertraits.Info{Version: "7.0.0"})); err != nil {
		t.Errorf("booting with $elemMatch on MongoDB: %v", err)
	}
	if _, err := boot(t, plain, nil); err != nil {
		t.Errorf("booting without $elemMatch on FerretDB: %v", err)
	}
}
