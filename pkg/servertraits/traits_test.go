package servertraits_test

import (
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
	"github.com/scorerefresh/scorerefresh/pkg/servertraits"
)

// TestLearntFeaturesAreShared: every holder of a feature's flag sees the
// refusal whoever met it, and only the first to meet it is told it is new.
func TestLearntFeaturesAreShared(t *testing.T) {
	t.Parallel()
	tr := servertraits.New()
	held := tr.Learnt(servertraits.AccumulatorMax)
	if tr.Lacks(servertraits.AccumulatorMax) || held.Load() {
		t.Fatal("a feature lacking before the server refused it")
	}
	if !tr.Refused(servertraits.AccumulatorMax) || tr.Refused(servertraits.AccumulatorMax) {
		t.Error("Refused: want first true, then false")
	}
	if !held.Load() {
		t.Error("a flag taken before the refusal does not see it")
	}
	if !held.CompareAndSwap(true, true) || tr.Learnt(servertraits.AccumulatorMax) != held {
		t.Error("Learnt returns another flag for the same feature")
	}
	tr.Refused(servertraits.BatchedShape("distinct"))
	want := []servertraits.Feature{servertraits.AccumulatorMax, "batched distinct"}
	if got := tr.Lacking(); !slices.Equal(got, want) {
		t.Errorf("Lacking: %v, want %v", got, want)
	}
	if tr.Lacks(servertraits.BatchedShape("sum")) {
		t.Error("one op's refusal is learnt for another")
	}
}

// TestReprobeForgetsWhatAnotherServerRefused: traits probed on a server of
// another version (a reconnect reached a primary of another release) forget
// what that server refused, in the flags their holders keep, and take the
// new server's answer; asked again, the same server keeps what was learnt.
// Fixed traits stay as they are.
func TestReprobeForgetsWhatAnotherServerRefused(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	// FerretDB names its storage only once it has opened a database: one
	// write first, or the first answer lacks it and the second does not
	// (the order the parallel tests of this package happen to run in).
	if _, err := db.Collection("score_events").InsertOne(t.Context(), bson.D{{Key: "username", Value: "ann"}}); err != nil {
		t.Fatal(err)
	}
	server, err := servertraits.Ask(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	other := servertraits.Info{Version: "6.0.0"}
	if server.Version == other.Version && server.FerretDB == "" {
		other.Version = "5.0.0"
	}
	tr := servertraits.ProbedAs(other)
	held := tr.Learnt(servertraits.AccumulatorMax)
	tr.Refused(servertraits.AccumulatorMax)

	changed, err := tr.Reprobe(t.Context(), db)
	if err != nil || !changed {
		t.Fatalf("Reprobe after a server change: changed %v, %v; want true", changed, err)
	}
	if held.Load() || len(tr.Lacking()) != 0 {
		t.Errorf("still lacking %v after the server changed", tr.Lacking())
	}
	if got := tr.Info(); got != server {
		t.Errorf("Info after Reprobe: %+v, want the server's %+v", got, server)
	}

	tr.Refused(servertraits.AccumulatorMax)
	if changed, err := tr.Reprobe(t.Context(), db); err != nil || changed || !held.Load() {
		t.Errorf("Reprobe of the same server: changed %v, %v, $max lacking %v; want unchanged and still lacking", changed, err, held.Load())
	}

	fixed := servertraits.Fixed(other)
	fixed.Refused(servertraits.AccumulatorMax)
	if changed, err := fixed.Reprobe(t.Context(), db); err != nil || changed || fixed.Info() != other || !fixed.Lacks(servertraits.AccumulatorMax) {
		t.Errorf("Reprobe of fixed traits: changed %v, %v, info %+v; want them untouched", changed, err, fixed.Info())
	}
}

// TestProbeReadsTheServer: the embedded server names itself FerretDB
// (TEST_MONGODB_URI may point the suite at a MongoDB, which does not).
func TestProbeReadsTheServer(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t, mongotest.Options{})
	tr := servertraits.New()
	if tr.Known() || !tr.FiltersUsernamesCheaply() {
		t.Fatal("unprobed traits do not report MongoDB's behaviour")
	}
	if err := tr.Probe(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	info := tr.Info()
	if info.Version == "" {
		t.Errorf("no version in %+v", info)
	}
	if ferret := info.FerretDB != ""; tr.FiltersUsernamesCheaply() == ferret || tr.ExplainsPlans() == ferret {
		t.Errorf("traits of %+v: FiltersUsernamesCheaply %v, ExplainsPlans %v", info, tr.FiltersUsernamesCheaply(), tr.ExplainsPlans())
	}
	if ferret := info.FerretDB != ""; tr.EvaluatesElemMatch() == ferret || (len(tr.MisreadOperators()) > 0) != ferret {
		t.Errorf("traits of %+v: EvaluatesElemMatch %v, MisreadOperators %v", info, tr.EvaluatesElemMatch(), tr.MisreadOperators())
	}
}

// TestMisreadOperatorsFollowTheServerKind: FerretDB gets $elemMatch wrong,
// MongoDB nothing; unprobed traits report MongoDB's behaviour.
func TestMisreadOperatorsFollowTheServerKind(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		tr   *servertraits.Traits
		want []string
	}{
		"unprobed": {servertraits.New(), nil},
		"MongoDB":  {servertraits.Fixed(servertraits.Info{Version: "7.0.0"}), nil},
		"FerretDB": {servertraits.Fixed(servertraits.Info{Version: "7.0.77", FerretDB: "v1.24.2", Backend: "SQLite"}), []string{"$elemMatch"}},
	} {
		if got := tc.tr.MisreadOperators(); !slices.Equal(got, tc.want) || tc.tr.EvaluatesElemMatch() != (tc.want == nil) {
			t.Errorf("%s: MisreadOperators %v, EvaluatesElemMatch %v; want %v", name, got, tc.tr.EvaluatesElemMatch(), tc.want)
		}
	}
}
