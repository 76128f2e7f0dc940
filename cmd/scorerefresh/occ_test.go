package main

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/pkg/mongotest"
)

// TestTwoProcessesRefreshingTheSameUsersLoseNothing makes two `scorerefresh
// run` processes refresh the same few users at the same time, so that their
// score writes meet in the database and optimistic concurrency alone keeps
// them apart. Leases would normally keep the processes off each other's
// users; here each process keeps its leases in a claims collection of its
// own, so each claims every user and both refresh and write the same score
// documents, while a producer keeps changing the users' source data. A
// proxy adds 5 ms each way, which widens the gap between a write's read and
// its update.
func TestTwoProcessesRefreshingTheSameUsersLoseNothing(t *testing.T) {
	t.Parallel()
	proxy := startProxy(t)
	w := newWorld(t, mongotest.URI(t))
	const users = 3
	w.seed(150, users)
	env := w.through(proxy, nil, "POLL_INTERVAL=20ms", "REFRESH_CONCURRENCY=4", "MAX_USERS_IN_FLIGHT=8")
	watch := watchScores(t, w)
	a := startProc(t, "a", append(env, "CLAIMS_COLLECTION=claims_a")...)
	b := startProc(t, "b", append(env, "CLAIMS_COLLECTION=claims_b")...)
	// The seeded backlog creates the score documents (racing inserts are
	// conflicts too). Then keep producing until the processes' updates have
	// met at least once: a version conflict on an existing document is the
	// proof that they raced on it.
	w.waitFor("the seeded backlog to drain", func() bool { return w.count("score_events") == 0 && w.count("user_scores") == users })
	inserts := conflicts(a, b)
	produced := 0
	for ; conflicts(a, b) == inserts; produced += 50 {
		if produced >= 1000 {
			t.Fatalf("no version conflict after %d events: the processes' writes never met; the test proves nothing", produced)
		}
		w.produce(50, users, uint64(produced))
		// Let the processes work through these before judging: producing
		// the next 50 at once would reach the cap before a refresh ran.
		w.waitFor("the produced events to be refreshed, or a conflict", func() bool {
			return conflicts(a, b) > inserts || w.count("score_events") == 0
		})
	}
	t.Logf("%v version conflicts while the documents were created; %d more events until updates conflicted", inserts, produced)
	w.waitFor("the queue to drain", func() bool { return w.count("score_events") == 0 })
	// Each process claims every user, so one may still be refreshing a user
	// whose entries the other has already acknowledged: its write would land
	// after the counters were read and look like a write without a refresh.
	w.waitFor("both processes to finish their refreshes", func() bool {
		return a.scrape("scorerefresh_users_in_flight")[0] == 0 && b.scrape("scorerefresh_users_in_flight")[0] == 0
	})
	var refreshes float64
	for _, p := range []*proc{a, b} {
		m := p.scrape("scorerefresh_refreshes_total{outcome=\"ok\"}", "scorerefresh_occ_conflicts_total")
		refreshes += m[0]
		t.Logf("%s: %v successful refreshes, %v version conflicts", p.name, m[0], m[1])
	}
	a.stop()
	b.stop()
	watch.stop()
	w.verify() // nothing queued, nothing dead-lettered, every score exact

	// Versions: each write adds exactly one, so the versions add up to at
	// most the refreshes that succeeded (a refresh writes once, or skips
	// an older result), and along a document's history the version and
	// refreshedAt never go back.
	var docs []struct {
		User    string `bson:"_id"`
		Version int64  `bson:"version"`
	}
	cur, err := w.db.Collection("user_scores").Find(t.Context(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cur.All(t.Context(), &docs); err != nil {
		t.Fatal(err)
	}
	var versions int64
	for _, d := range docs {
		if d.Version < 1 {
			t.Errorf("%s: version %d", d.User, d.Version)
		}
		versions += d.Version
	}
	if len(docs) != users || float64(versions) > refreshes {
		t.Errorf("%d score documents with versions adding up to %d after %v successful refreshes", len(docs), versions, refreshes)
	}
	for _, problem := range watch.problems() {
		t.Error(problem)
	}
}

func conflicts(procs ...*proc) float64 {
	var n float64
	for _, p := range procs {
		n += p.scrape("scorerefresh_occ_conflicts_total")[0]
	}
	return n
}

// scoreWatch reads user_scores over and over while the processes run and
// records any document whose version or refreshedAt went back.
type scoreWatch struct {
	done chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	bad  []string
}

func watchScores(t *testing.T, w *world) *scoreWatch {
	s := &scoreWatch{done: make(chan struct{})}
	type seen struct {
		version int64
		at      time.Time
	}
	last := map[string]seen{}
	s.wg.Go(func() {
		for {
			select {
			case <-s.done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var docs []struct {
				User        string    `bson:"_id"`
				Version     int64     `bson:"version"`
				RefreshedAt time.Time `bson:"refreshedAt"`
			}
			cur, err := w.db.Collection("user_scores").Find(t.Context(), bson.D{})
			if err != nil || cur.All(t.Context(), &docs) != nil {
				continue
			}
			for _, d := range docs {
				prev := last[d.User]
				if d.Version < prev.version || (d.Version > prev.version && d.RefreshedAt.Before(prev.at)) {
					s.mu.Lock()
					s.bad = append(s.bad, d.User+": version "+strconv.FormatInt(prev.version, 10)+" at "+prev.at.Format(time.RFC3339Nano)+
						" then version "+strconv.FormatInt(d.Version, 10)+" at "+d.RefreshedAt.Format(time.RFC3339Nano))
					s.mu.Unlock()
				}
				last[d.User] = seen{d.Version, d.RefreshedAt}
			}
		}
	})
	return s
}

func (s *scoreWatch) stop() { close(s.done); s.wg.Wait() }

func (s *scoreWatch) problems() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bad
}

// scrape reads the named series (name with its labels, as exposed) from
// the process's /metrics; a series not exposed reads 0.
func (p *proc) scrape(series ...string) []float64 {
	p.t.Helper()
	resp, err := http.Get("http://" + p.metricsAddr + "/metrics")
	if err != nil {
		p.t.Fatalf("scraping %s: %v", p.name, err)
	}
	defer resp.Body.Close()
	values := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.Fields(value)[0], 64); err == nil {
			values[name] = v
		}
	}
	out := make([]float64, len(series))
	for i, s := range series {
		out[i] = values[s]
	}
	return out
}
