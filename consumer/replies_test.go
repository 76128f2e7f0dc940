package consumer

import (
	"errors"
	"path/filepath"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// recordedReply reads testdata/replies/name (mongotest.RecordedReply).
func recordedReply(t testing.TB, name string) bson.Raw {
	t.Helper()
	return mongotest.RecordedReply(t, filepath.Join("testdata", "replies", name))
}

// insertManyError returns the error InsertMany returns for an insert
// command answered with reply: the driver's own reading of the reply
// (driver.ExtractErrorFromServerResponse), then the steps of the unexported
// processWriteError and of Collection.InsertMany in mongo-driver v2.10.0,
// which turn its WriteCommandError into a BulkWriteException.
func insertManyError(t *testing.T, reply bson.Raw) error {
	t.Helper()
	err := driver.ExtractErrorFromServerResponse(bsoncore.Document(reply))
	var wce driver.WriteCommandError
	if !errors.As(err, &wce) {
		t.Fatalf("the driver reads %v from the reply, not write errors", err)
	}
	bwe := mongo.BulkWriteException{Labels: wce.Labels}
	for _, we := range wce.WriteErrors {
		bwe.WriteErrors = append(bwe.WriteErrors, mongo.BulkWriteError{WriteError: mongo.WriteError{
			Index: int(we.Index), Code: int(we.Code), Message: we.Message, Details: bson.Raw(we.Details), Raw: bson.Raw(we.Raw),
		}})
	}
	if c := wce.WriteConcernError; c != nil {
		bwe.WriteConcernError = &mongo.WriteConcernError{Name: c.Name, Code: int(c.Code), Message: c.Message, Details: bson.Raw(c.Details), Raw: bson.Raw(c.Raw)}
	}
	return bwe
}

// TestRecordedWriteErrorsClassified: the insert replies MongoDB documents
// for a duplicate key, a write concern it cannot satisfy and a write to a
// member that is no longer primary, read as the lease insert (acquire) and
// transient() read them: only the duplicate key is a contested lease, only
// the stepped-down member is worth a retry without counting an attempt.
func TestRecordedWriteErrorsClassified(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file          string
		dupIndexes    []int // write errors acquire counts as a held lease
		concernFailed bool  // acquire abandons the round
		transient     bool
	}{
		{"insert-duplicate-key.json", []int{1}, false, false},
		{"insert-write-concern-error.json", nil, true, false},
		{"insert-not-primary-write-error.json", nil, false, true},
	} {
		err := insertManyError(t, recordedReply(t, tc.file))
		var bwe mongo.BulkWriteException
		if !errors.As(err, &bwe) {
			t.Fatalf("%s: %T is no BulkWriteException", tc.file, err)
		}
		var dups []int
		for _, we := range bwe.WriteErrors {
			if mongo.IsDuplicateKeyError(we) {
				dups = append(dups, we.Index)
			}
		}
		if len(dups) != len(tc.dupIndexes) || (len(dups) > 0 && dups[0] != tc.dupIndexes[0]) {
			t.Errorf("%s: duplicate keys at %v, want %v", tc.file, dups, tc.dupIndexes)
		}
		if (bwe.WriteConcernError != nil) != tc.concernFailed {
			t.Errorf("%s: write concern error %v, want one: %v", tc.file, bwe.WriteConcernError, tc.concernFailed)
		}
		if got := transient(err); got != tc.transient {
			t.Errorf("%s: transient = %v, want %v", tc.file, got, tc.transient)
		}
	}
}
