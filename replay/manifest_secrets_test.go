package replay

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A snapshot's manifest travels with the data (attached to tickets, copied
// to laptops): whatever a caller records as its origin, no secret is written.
func TestSnapshotManifestNeverHoldsASecret(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seedQueue(t, b.db.Collection("score_events"), 3, 0)
	out := filepath.Join(t.TempDir(), "snap")
	origin := "mongodb://admin:hunter2@h1,h2/?tlsCertificateKeyFilePassword=hunter3&authMechanismProperties=AWS_SESSION_TOKEN:hunter4"
	m, err := Snapshot(t.Context(), SnapshotConfig{DB: b.db, Queue: "score_events", Sources: []string{"user_activity"}, Out: out, Origin: origin})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(out, ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{string(raw), m.Origin} {
		for _, secret := range []string{"hunter2", "hunter3", "hunter4"} {
			if strings.Contains(s, secret) {
				t.Errorf("%s in the manifest:\n%s", secret, s)
			}
		}
	}
	if !strings.Contains(string(raw), "h1,h2") {
		t.Errorf("the manifest lost the hosts:\n%s", raw)
	}
}
