package app

import (
	"strings"
	"testing"

	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/pkg/queryplan"
)

// TestSetupBuildsIndexesWithoutMaxTimeMS runs the service's setup, on a
// client whose URI sets timeoutMS, and records what it sends: no
// createIndexes may carry maxTimeMS. MongoDB aborts a build whose
// createIndexes runs out of it, so on a queue deep enough for a build to
// outlast it the index was never built and every replica started it again.
func TestSetupBuildsIndexesWithoutMaxTimeMS(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	uri := mongotest.URI(t)
	sep := "?"
	if strings.Contains(uri, "?") {
		sep = "&"
	}
	cfg, err := config.Parse([]string{
		"MONGODB_URI=" + uri + sep + "timeoutMS=20000", "MONGODB_DATABASE=" + db.Name(), "METRICS_ADDR=127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	var rec queryplan.Recorder
	svc := newService(t, cfg, Options{Monitor: rec.Monitor()})
	svc.setup(t.Context()) // returns once the indexes are settled
	builds := 0
	for _, c := range rec.Take() {
		if c.Name != "createIndexes" {
			continue
		}
		builds++
		if v, err := c.Body.LookupErr("maxTimeMS"); err == nil {
			t.Errorf("createIndexes on %s carries maxTimeMS %v", c.Collection, v)
		}
	}
	if builds == 0 {
		t.Error("setup sent no createIndexes")
	}
}
