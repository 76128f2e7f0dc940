package servertraits_test

import (
	"os"
	"path/filepath"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// recordedReply reads testdata/replies/name (mongotest.RecordedReply).
func recordedReply(t testing.TB, name string) bson.Raw {
	t.Helper()
	return mongotest.RecordedReply(t, filepath.Join("testdata", "replies", name))
}

// TestParseRecordedReplies reads hello and buildInfo replies recorded from
// MongoDB (a replica-set primary, a mongos, a standalone) and from the
// embedded FerretDB, and checks what the traits make of each pair.
func TestParseRecordedReplies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		build, hello string
		want         servertraits.Info
	}{
		{"buildinfo-mongodb-5.0.json", "hello-rs-primary-6.0.json",
			servertraits.Info{Version: "5.0.0", SetName: "replicasetname", Primary: "HOST1:27017", WritablePrimary: true}},
		{"buildinfo-mongodb-5.0.json", "hello-rs-primary-spec.json",
			servertraits.Info{Version: "5.0.0", SetName: "rs", WritablePrimary: true}},
		{"buildinfo-mongodb-5.0.json", "hello-mongos.json",
			servertraits.Info{Version: "5.0.0", Sharded: true, WritablePrimary: true}},
		{"buildinfo-mongodb-5.0.json", "hello-standalone.json",
			servertraits.Info{Version: "5.0.0", WritablePrimary: true}},
		// The legacy handshake names the primary "ismaster": read as hello,
		// it is a standalone that is not writable, which Ask never meets
		// (it sends hello, which every supported server answers).
		{"buildinfo-mongodb-5.0.json", "ismaster-standalone-5.0.json",
			servertraits.Info{Version: "5.0.0"}},
		{"buildinfo-ferretdb-1.24.json", "hello-ferretdb-1.24.json",
			servertraits.Info{Version: "7.0.42", FerretDB: "unknown", WritablePrimary: true}},
	} {
		got, err := servertraits.Parse(recordedReply(t, tc.build), recordedReply(t, tc.hello))
		if err != nil {
			t.Errorf("%s + %s: %v", tc.build, tc.hello, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s + %s: %+v, want %+v", tc.build, tc.hello, got, tc.want)
		}
		tr := servertraits.Fixed(got)
		mongo := got.FerretDB == ""
		if tr.Sharded() != tc.want.Sharded || tr.FiltersUsernamesCheaply() != mongo || tr.PushesInDown() != mongo ||
			tr.CheapUpserts() != mongo || tr.BoundsReplies() != mongo || tr.ExplainsPlans() != mongo || tr.SingleUpdatesHoldConnections() == mongo {
			t.Errorf("%s + %s: traits of %+v read as another server", tc.build, tc.hello, got)
		}
	}
}

// FuzzParseReplies: no hello or buildInfo reply, whatever its fields'
// types, makes the parsers panic. The recorded replies are the seeds.
func FuzzParseReplies(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "replies", "*.json"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no recorded replies: %v", err)
	}
	for _, file := range files {
		f.Add([]byte(recordedReply(f, filepath.Base(file))))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		raw := bson.Raw(data)
		if raw.Validate() != nil {
			return
		}
		servertraits.ParseBuildInfo(raw)
		_, _ = servertraits.Parse(raw, raw)
	})
}

// TestFerretDBNamesItsBackend: FerretDB's storage is read from its startup
// warnings (the line msg_getlog.go writes), and the embedded server is
// found to be SQLite, where a user's query is no cheaper than a batch's.
func TestFerretDBNamesItsBackend(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]string{
		"Powered by FerretDB v1.24.2 and SQLite 3.46.0.":    "SQLite",
		"Powered by FerretDB v1.24.2 and PostgreSQL 15.18.": "PostgreSQL",
		"Powered by FerretDB v1.24.2.":                      "",
	} {
		if got := servertraits.ParseBackend([]string{"Please star us on GitHub.", line}); got != want {
			t.Errorf("%q: backend %q, want %q", line, got, want)
		}
	}
	if os.Getenv(mongotest.EnvURI) != "" {
		return // the suite points at a server of its own
	}
	// FerretDB names its storage once it has opened a database, as it has
	// by the time the service probes a queue that exists.
	db := mongotest.Database(t, mongotest.Options{})
	if _, err := db.Collection("score_events").InsertOne(t.Context(), bson.D{{Key: "username", Value: "ann"}}); err != nil {
		t.Fatal(err)
	}
	traits := servertraits.New()
	if err := traits.Probe(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	if info := traits.Info(); info.Backend != "SQLite" || traits.PushesEqualityDown() {
		t.Errorf("the embedded server: backend %q, pushes equality down %v; want SQLite, false", info.Backend, traits.PushesEqualityDown())
	}
}
