package mongotest

import (
	"os"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// RecordedReply reads the server reply recorded at path (Extended JSON,
// whose first field "_source" names where it was taken from: a page of
// MongoDB's manual, a file of a driver's or the server's tests) and
// returns it without that field. A fixture that names no source fails
// the test: replies written from memory are how wrong shapes get in.
func RecordedReply(t testing.TB, path string) bson.Raw {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc bson.D
	if err := bson.UnmarshalExtJSON(data, false, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(doc) == 0 || doc[0].Key != "_source" || doc[0].Value == "" {
		t.Fatalf("%s names no _source", path)
	}
	raw, err := bson.Marshal(doc[1:])
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
