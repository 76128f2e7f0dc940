package ops

import (
	"path/filepath"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// recordedReply reads testdata/replies/name (mongotest.RecordedReply).
func recordedReply(t testing.TB, name string) bson.Raw {
	t.Helper()
	return mongotest.RecordedReply(t, filepath.Join("testdata", "replies", name))
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
