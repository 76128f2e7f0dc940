package mongotest

import (
	"context"
	"maps"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestCommandsRecordsWhatIsSentAndAnswered runs commands against the
// embedded server: each is recorded with its collection and reply, a failure
// is marked, OnStarted sees every command, and Take starts again.
func TestCommandsRecordsWhatIsSentAndAnswered(t *testing.T) {
	t.Parallel()
	var started int
	cmds := &Commands{OnStarted: func(context.Context, Command) { started++ }}
	db := Database(t, Options{Monitor: cmds.Monitor(nil)})
	ctx := t.Context()
	if _, err := db.Collection("a").InsertOne(ctx, bson.D{{Key: "x", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	cmds.Reset()
	if _, err := db.Collection("a").InsertOne(ctx, bson.D{{Key: "x", Value: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Collection("a").FindOne(ctx, bson.D{}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("b").InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := db.RunCommand(ctx, bson.D{{Key: "noSuchCommand", Value: 1}}).Err(); err == nil {
		t.Fatal("an unknown command succeeded")
	}
	if n := cmds.Count("insert", "a"); n != 1 {
		t.Errorf("%d inserts into a since the reset, want 1", n)
	}
	if n := cmds.Count("insert", ""); n != 2 {
		t.Errorf("%d inserts since the reset, want 2", n)
	}
	got := cmds.Take()
	if want := map[string]int{"insert": 2, "find": 1, "noSuchCommand": 1}; !maps.Equal(ByName(got), want) {
		t.Errorf("commands %v, want %v", ByName(got), want)
	}
	sent, received := 0, 0
	for _, c := range got {
		sent, received = sent+len(c.Body), received+len(c.Reply)
		if c.Failed != (c.Name == "noSuchCommand") || (c.Reply == nil) != c.Failed {
			t.Errorf("%s on %q: failed %v, reply %v", c.Name, c.Collection, c.Failed, c.Reply)
		}
		if c.Name == "find" && c.Collection != "a" {
			t.Errorf("find on %q, want a", c.Collection)
		}
	}
	if sent == 0 || received == 0 {
		t.Errorf("%d bytes sent, %d received, want both", sent, received)
	}
	if started != 5 {
		t.Errorf("OnStarted saw %d commands, want all 5", started)
	}
	if n := len(cmds.All()); n != 0 {
		t.Errorf("%d commands after Take, want none", n)
	}
}
