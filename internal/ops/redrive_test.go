package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// deadLetters inserts n max_attempts dead letters with ObjectId _ids, an hour
// old, and returns their _ids.
func deadLetters(t *testing.T, c Collections, n int) []bson.ObjectID {
	t.Helper()
	at := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var docs []any
	var ids []bson.ObjectID
	for i := range n {
		id := bson.NewObjectID()
		ids = append(ids, id)
		docs = append(docs, deadDoc(id, fmt.Sprintf("u%03d", i), "max_attempts", at.Add(time.Duration(i)*time.Millisecond)))
	}
	mustInsert(t, c, "dead", docs...)
	return ids
}

func queueIDs(t *testing.T, c Collections) []string {
	t.Helper()
	cur, err := c.Queue.Find(t.Context(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var docs []bson.Raw
	if err := cur.All(t.Context(), &docs); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range docs {
		ids = append(ids, idString(d.Lookup("_id")))
	}
	slices.Sort(ids)
	return ids
}

func hexes(ids []bson.ObjectID) []string {
	var out []string
	for _, id := range ids {
		out = append(out, id.Hex())
	}
	slices.Sort(out)
	return out
}

func countDocs(t *testing.T, coll *mongo.Collection) int64 {
	t.Helper()
	n, err := coll.CountDocuments(t.Context(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRedriveRequeuesWithAFreshCreatedAtAndRemovesTheDeadLetters(t *testing.T) {
	t.Parallel()
	c := testColls(t, nil)
	now := time.Now()
	populate(t, c, now) // d1, d2 max_attempts; d3 malformed
	renamedOf := "d1"
	mustInsert(t, c, "dead",
		bson.D{{Key: "_id", Value: "d1-renamed"}, {Key: "username", Value: "ann"}, {Key: "createdAt", Value: now.Add(-4 * time.Hour)},
			{Key: "deadLetter", Value: bson.D{{Key: "reason", Value: "max_attempts"}, {Key: "at", Value: now.Add(-time.Hour)}, {Key: "attempts", Value: int32(5)}, {Key: "originalId", Value: renamedOf}}}},
		bson.D{{Key: "_id", Value: "big"}, {Key: "username", Value: "zed"}, {Key: "originalSize", Value: 17 << 20},
			{Key: "deadLetter", Value: bson.D{{Key: "reason", Value: "too_large"}, {Key: "at", Value: now.Add(-time.Hour)}}}},
	)
	before := time.Now()
	res, err := Redrive(t.Context(), c, RedriveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requeued != 3 || res.Removed != 3 || res.Skipped["malformed"] != 1 || res.Skipped["too_large"] != 1 || res.Conflicts != 0 {
		t.Fatalf("result %+v: want 3 requeued and removed, malformed and too_large skipped", res)
	}
	var e struct {
		Username   string    `bson:"username"`
		Payload    string    `bson:"payload"`
		CreatedAt  time.Time `bson:"createdAt"`
		DeadLetter bson.Raw  `bson:"deadLetter"`
		Redrive    struct {
			OriginalCreatedAt time.Time `bson:"originalCreatedAt"`
			At                time.Time `bson:"at"`
			Reason            string    `bson:"reason"`
			DeadLetteredAt    time.Time `bson:"deadLetteredAt"`
			OriginalID        string    `bson:"originalId"`
		} `bson:"redrive"`
	}
	if err := c.Queue.FindOne(t.Context(), bson.D{{Key: "_id", Value: "d2"}}).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if e.Username != "bo" || e.Payload != "x" || e.DeadLetter != nil || e.Redrive.Reason != "max_attempts" {
		t.Errorf("requeued d2 = %+v: want its fields, no deadLetter, the reason in redrive", e)
	}
	if e.CreatedAt.Before(before.Add(-time.Second)) || !e.CreatedAt.Equal(e.Redrive.At) {
		t.Errorf("createdAt %v, redrive.at %v: want both the time of the redrive", e.CreatedAt, e.Redrive.At)
	}
	if want := now.Add(-2*time.Hour - time.Minute); e.Redrive.OriginalCreatedAt.Sub(want).Abs() > time.Millisecond {
		t.Errorf("originalCreatedAt %v, want %v", e.Redrive.OriginalCreatedAt, want)
	}
	if err := c.Queue.FindOne(t.Context(), bson.D{{Key: "_id", Value: "d1-renamed"}}).Decode(&e); err != nil || e.Redrive.OriginalID != renamedOf {
		t.Errorf("renamed copy: %v, redrive.originalId %q: want it queued under its own _id with the original's recorded", err, e.Redrive.OriginalID)
	}
	if got := countDocs(t, c.DeadLetter); got != 2 {
		t.Errorf("%d dead letters left, want the malformed and the too_large ones", got)
	}
	again, err := Redrive(t.Context(), c, RedriveOptions{})
	if err != nil || again.Read != 0 || countDocs(t, c.Queue) != 37+3 {
		t.Errorf("second run: %+v, %v: want nothing read, nothing queued twice", again, err)
	}
}

// TestRedriveKilledHalfwayThenRerunLosesNothingAndQueuesNothingTwice stops a
// run between a batch's insert and its delete (where a crash hurts most),
// and another by cancelling its context after a batch; each re-run finishes
// the job.
func TestRedriveKilledHalfwayThenRerunLosesNothingAndQueuesNothingTwice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		stop func(cancel context.CancelFunc) RedriveOptions
	}{
		{"crash between insert and delete", func(context.CancelFunc) RedriveOptions {
			return RedriveOptions{Batch: 10, AfterInsert: func(batch int) error {
				if batch == 2 {
					return errors.New("killed")
				}
				return nil
			}}
		}},
		{"context cancelled after a batch", func(cancel context.CancelFunc) RedriveOptions {
			return RedriveOptions{Batch: 10, Progress: func(r RedriveResult) {
				if r.Batches == 2 {
					cancel()
				}
			}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := testColls(t, nil)
			ids := deadLetters(t, c, 25)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			first, err := Redrive(ctx, c, tc.stop(cancel))
			if err == nil {
				t.Fatal("the interrupted run reported no error")
			}
			if first.Removed >= 25 || first.Requeued == 0 {
				t.Fatalf("first run %+v: want it stopped part way", first)
			}
			second, err := Redrive(t.Context(), c, RedriveOptions{Batch: 10})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := queueIDs(t, c), hexes(ids); !slices.Equal(got, want) {
				t.Errorf("queue holds %d entries %v, want each of the 25 exactly once", len(got), got)
			}
			if n := countDocs(t, c.DeadLetter); n != 0 {
				t.Errorf("%d dead letters left", n)
			}
			if first.Removed+second.Removed != 25 || first.Requeued+second.Requeued != 25 {
				t.Errorf("runs %+v then %+v: want 25 requeued and removed between them", first, second)
			}
			if tc.name == "crash between insert and delete" && second.AlreadyQueued != 10 {
				t.Errorf("re-run found %d already queued, want the 10 of the interrupted batch", second.AlreadyQueued)
			}
		})
	}
}

func TestRedriveLeavesADeadLetterWhoseIDTheQueueHoldsForAnotherEntry(t *testing.T) {
	t.Parallel()
	c := testColls(t, nil)
	ids := deadLetters(t, c, 3)
	mustInsert(t, c, "queue", bson.D{{Key: "_id", Value: ids[1]}, {Key: "username", Value: "someone-else"}, {Key: "createdAt", Value: time.Now()}})
	res, err := Redrive(t.Context(), c, RedriveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requeued != 2 || res.Conflicts != 1 || res.Removed != 2 || len(res.Problems) != 1 {
		t.Fatalf("result %+v: want 2 requeued, 1 conflict reported", res)
	}
	var left struct {
		ID bson.ObjectID `bson:"_id"`
	}
	if err := c.DeadLetter.FindOne(t.Context(), bson.D{}).Decode(&left); err != nil || left.ID != ids[1] {
		t.Errorf("dead letter left: %v %v, want the conflicting one", left.ID, err)
	}
	var other struct {
		Username string `bson:"username"`
	}
	if err := c.Queue.FindOne(t.Context(), bson.D{{Key: "_id", Value: ids[1]}}).Decode(&other); err != nil || other.Username != "someone-else" {
		t.Errorf("the other entry became %q (%v)", other.Username, err)
	}
}

func TestRedriveForceTakesMalformedAndTooLarge(t *testing.T) {
	t.Parallel()
	c := testColls(t, nil)
	populate(t, c, time.Now())
	res, err := Redrive(t.Context(), c, RedriveOptions{Filter: Filter{Reasons: []string{"malformed"}}, Force: true})
	if err != nil || res.Requeued != 1 || len(res.Skipped) != 0 {
		t.Fatalf("result %+v, %v: want the malformed one requeued", res, err)
	}
}

// TestRedriveDoesNotTakeWhatFailsAgainDuringTheRun: a redriven entry that is
// dead-lettered again while the run goes on is not redriven again by it. (A
// cursor may or may not see documents inserted after it opened, so the test
// dates the later dead letter after the run's start instead.)
func TestRedriveDoesNotTakeWhatFailsAgainDuringTheRun(t *testing.T) {
	t.Parallel()
	c := testColls(t, nil)
	deadLetters(t, c, 4)
	mustInsert(t, c, "dead", deadDoc("again", "u000", "max_attempts", time.Now().Add(time.Minute)))
	res, err := Redrive(t.Context(), c, RedriveOptions{Batch: 2})
	if err != nil || res.Requeued != 4 || res.Read != 4 {
		t.Fatalf("result %+v, %v: want the 4 dead letters older than the run only", res, err)
	}
}

func TestRedriveDryRunWritesNothing(t *testing.T) {
	t.Parallel()
	var cmds mongotest.Commands
	c := testColls(t, cmds.Monitor(nil))
	ids := deadLetters(t, c, 5)
	mustInsert(t, c, "queue", bson.D{{Key: "_id", Value: ids[0]}, {Key: "username", Value: "other"}, {Key: "createdAt", Value: time.Now()}})
	cmds.Reset()
	res, err := Redrive(t.Context(), c, RedriveOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := mongotest.ByName(cmds.Take()); got["insert"]+got["delete"]+got["update"] != 0 {
		t.Errorf("a dry run sent %v", got)
	}
	if !res.DryRun || res.Requeued != 4 || res.Conflicts != 1 || countDocs(t, c.DeadLetter) != 5 {
		t.Errorf("dry run %+v: want 4 to requeue, 1 conflict, nothing changed", res)
	}
}

// TestRedriveCostsOneRoundTripPerBatch: 30 dead letters in batches of 10
// take three inserts, three deletes and three reads of the cursor, not one
// of each per entry.
func TestRedriveCostsOneRoundTripPerBatch(t *testing.T) {
	t.Parallel()
	var cmds mongotest.Commands
	c := testColls(t, cmds.Monitor(nil))
	deadLetters(t, c, 30)
	cmds.Reset()
	var progress []int64
	res, err := Redrive(t.Context(), c, RedriveOptions{Batch: 10, Progress: func(r RedriveResult) { progress = append(progress, r.Removed) }})
	if err != nil || res.Requeued != 30 || res.Total != 30 {
		t.Fatalf("result %+v, %v", res, err)
	}
	got := mongotest.ByName(cmds.Take())
	if got["insert"] != 3 || got["delete"] != 3 || got["find"]+got["getMore"] > 4 {
		t.Errorf("commands %v: want 3 inserts, 3 deletes, a find and its getMores", got)
	}
	if !slices.Equal(progress, []int64{10, 20, 30}) {
		t.Errorf("progress %v, want after every batch", progress)
	}
}

func TestRequeuedKeepsTheFirstOriginalCreatedAt(t *testing.T) {
	t.Parallel()
	first := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dl, _ := bson.Marshal(bson.D{
		{Key: "_id", Value: 1}, {Key: "username", Value: "ann"}, {Key: "createdAt", Value: first.Add(time.Hour)},
		{Key: "redrive", Value: bson.D{{Key: "originalCreatedAt", Value: first}}},
		{Key: "deadLetter", Value: bson.D{{Key: "reason", Value: "max_attempts"}}},
	})
	now := first.Add(48 * time.Hour)
	raw, err := Requeued(dl, now)
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		CreatedAt time.Time `bson:"createdAt"`
		Redrive   struct {
			OriginalCreatedAt time.Time     `bson:"originalCreatedAt"`
			DeadLetteredAt    bson.RawValue `bson:"deadLetteredAt"`
		} `bson:"redrive"`
		DeadLetter bson.Raw `bson:"deadLetter"`
	}
	if err := bson.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	if !e.Redrive.OriginalCreatedAt.Equal(first) || !e.CreatedAt.Equal(now) || e.DeadLetter != nil {
		t.Errorf("requeued %+v: want the first redrive's original time, createdAt now, no deadLetter", e)
	}
	if e.Redrive.DeadLetteredAt.Type != bson.TypeNull {
		t.Errorf("deadLetteredAt of a dead letter without one: %v, want null", e.Redrive.DeadLetteredAt)
	}
	undated, _ := bson.Marshal(bson.D{{Key: "_id", Value: bson.NewObjectIDFromTimestamp(first)}, {Key: "username", Value: "bo"}})
	raw, _ = Requeued(undated, now)
	if err := bson.Unmarshal(raw, &e); err != nil || !e.Redrive.OriginalCreatedAt.Equal(first) {
		t.Errorf("undated entry: originalCreatedAt %v, want its ObjectId's time %v", e.Redrive.OriginalCreatedAt, first)
	}
}
