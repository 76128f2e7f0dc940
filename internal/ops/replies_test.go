package ops

import (
	"os"
	"path/filepath"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// recordedReply reads testdata/replies/name, a server's reply recorded with
// the place it came from in "_source", and returns it without that field.
func recordedReply(t testing.TB, name string) bson.Raw {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "replies", name))
	if err != nil {
		t.Fatal(err)
	}
	var doc bson.D
	if err := bson.UnmarshalExtJSON(data, false, &doc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(doc) == 0 || doc[0].Key != "_source" || doc[0].Value == "" {
		t.Fatalf("%s names no _source", name)
	}
	raw, err := bson.Marshal(doc[1:])
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestDoctorReadsRecordedReplies: the doctor's readers of serverStatus and
// connectionStatus on replies recorded from MongoDB and from the embedded
// FerretDB, which reports no connections and no privileges.
func TestDoctorReadsRecordedReplies(t *testing.T) {
	t.Parallel()
	if current, available, ok := parseConnections(recordedReply(t, "serverstatus-mongodb-2.6.json")); !ok || current != 1 || available != 818 {
		t.Errorf("MongoDB serverStatus: current %d, available %d, ok %v; want 1, 818, true", current, available, ok)
	}
	if _, _, ok := parseConnections(recordedReply(t, "serverstatus-ferretdb-1.24.json")); ok {
		t.Error("FerretDB's serverStatus read as reporting connections")
	}
	users, privs, err := parseConnectionStatus(recordedReply(t, "connectionstatus-ferretdb-1.24.json"))
	if err != nil || len(users) != 0 || len(privs) != 0 {
		t.Errorf("FerretDB connectionStatus: users %v, privileges %v, %v; want none and no error", users, privs, err)
	}
}
