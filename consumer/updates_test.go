package consumer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// TestBulkLeaseUpdatesOfManyUsersComplete marks 110 claimed users as
// running and then backs them all off, each in one command, on the test
// server. FerretDB 1.24 holds one of its 100 SQLite connections per
// single-document update statement until the whole command returns, so a
// command of 100 updateOne statements deadlocks it, and a fleet's
// concurrent commands of a few dozen each do the same together: every
// later command then waits for a connection (the fleet jam). The service
// sends such statements as multi-document ones there (servertraits).
func TestBulkLeaseUpdatesOfManyUsersComplete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var names []string
	for i := range 110 { // past 100 statements in one command: alone enough to deadlock the old shape
		names = append(names, fmt.Sprintf("u%03d", i))
	}
	b.enqueue(t, names...)
	c, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{cfg: Config{ClaimWindow: 1000, MaxUsersInFlight: 200}})
	res, err := c.claimer.round(t.Context(), 200, AbsorbLimit, nil)
	if err != nil || len(res.works) != len(names) {
		t.Fatalf("claim: %v, %d users, want %d", err, len(res.works), len(names))
	}
	held := make([]lease, len(res.works))
	failed := make([]retry, len(res.works))
	for i, w := range res.works {
		held[i] = w.lease
		failed[i] = retry{lease: w.lease, notBefore: time.Now().Add(time.Hour), err: "test", charge: 1}
	}
	// A jammed server never answers: bound each command so the test
	// fails instead of hanging (the client's disconnect at the end frees
	// the server again).
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a deadlock never ends; a busy machine is slow
	defer cancel()
	if err := c.leases.mark(ctx, held...); err != nil {
		t.Fatalf("marking %d refreshes as running: %v", len(held), err)
	}
	if err := c.leases.backOff(ctx, failed); err != nil {
		t.Fatalf("backing off %d users: %v", len(failed), err)
	}
	if n := b.count(t, b.colls.Claims, bson.D{{Key: "attempts", Value: 1}, {Key: "token", Value: nil}}); n != len(names) {
		t.Errorf("%d users backed off with one attempt, want %d", n, len(names))
	}
}

// multiStatements counts the update statements among cmds by whether
// each is multi-document.
func multiStatements(cmds []mongotest.Command) map[bool]int {
	multi := map[bool]int{}
	for _, c := range cmds {
		if c.Name != "update" {
			continue
		}
		vals, _ := c.Body.Lookup("updates").Array().Values()
		for _, v := range vals {
			m, _ := v.Document().Lookup("multi").BooleanOK()
			multi[m]++
		}
	}
	return multi
}

// TestUpdateStatementsFollowTheServer pins the statements each server
// receives: MongoDB gets single-document statements (retryable writes), and
// a server whose single-document statements hold a connection each gets
// multi-document ones whose filter pins _id (the same one document).
func TestUpdateStatementsFollowTheServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		info   servertraits.Info
		single bool
	}{
		{"mongodb", servertraits.Info{Version: "7.0.0"}, true},
		{"ferretdb", servertraits.Info{Version: "7.0.0", FerretDB: "v1.24.2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &mongotest.Commands{}
			b := setup(t).watchedBy(t, rec.Monitor(nil))
			b.enqueue(t, "ann", "bob", "cy")
			c, _ := b.newConsumer(t, newRecorder(nil), consumerOpts{})
			traits := servertraits.Fixed(tc.info)
			c.leases.traits = traits
			res, err := c.claimer.round(t.Context(), 10, AbsorbLimit, nil)
			if err != nil || len(res.works) != 3 {
				t.Fatalf("claim: %v", err)
			}
			var held []lease
			var failed []retry
			for _, w := range res.works {
				held = append(held, w.lease)
				failed = append(failed, retry{lease: w.lease, notBefore: time.Now(), err: "test"})
			}
			rec.Reset()
			if err := c.leases.mark(t.Context(), held...); err != nil {
				t.Fatal(err)
			}
			if err := c.leases.backOff(t.Context(), failed); err != nil {
				t.Fatal(err)
			}
			want := map[bool]int{!tc.single: 6}
			if got := multiStatements(rec.Take()); got[true] != want[true] || got[false] != want[false] {
				t.Errorf("update statements by multi: %v, want %v", got, want)
			}
		})
	}
}
