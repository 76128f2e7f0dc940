package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/internal/app"
	gen "github.com/scorerefresh/scorerefresh/internal/backlog"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/queuestate"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// backlog is a demo queue and the source data its events announce, shaped
// for the built-in rules (activity: sum of user_activity.points over 720h).
type backlog struct {
	entries  []any
	activity []any
	want     map[string]float64 // expected score per user
}

// newBacklog draws o's backlog: events of the last ten minutes, oldest
// first; user 0 is the firehose user, the others are drawn uniformly.
func newBacklog(o demoOptions) *backlog {
	rnd := rand.New(rand.NewPCG(o.seed, 0))
	users, first := o.users, 0
	if o.firehose > 0 {
		users, first = o.users+1, 1
	}
	name := func(i int) string {
		if i < first {
			return "firehose"
		}
		return fmt.Sprintf("user-%04d", i-first)
	}
	entries := gen.Generate(gen.Spec{Shape: gen.Firehose, Entries: o.entries, Users: users, Hot: o.firehose, End: time.Now()}, rnd)
	activity, want := gen.Activity(entries, name, rnd, 0)
	return &backlog{entries: gen.QueueDocs(entries, name, "demo"), activity: activity, want: want}
}

// seed inserts the backlog as producers write it: the source data first,
// then the events.
func (b *backlog) seed(ctx context.Context, db *mongo.Database, cfg config.Config) error {
	colls := []*mongo.Collection{db.Collection("user_activity"), db.Collection(cfg.QueueCollection)}
	for c, docs := range [][]any{b.activity, b.entries} {
		for i := 0; i < len(docs); i += 1000 {
			if _, err := colls[c].InsertMany(ctx, docs[i:min(i+1000, len(docs))]); err != nil {
				return fmt.Errorf("seeding %s: %w", colls[c].Name(), err)
			}
		}
	}
	return nil
}

// verify checks every user's stored score against the sum of their seeded
// activity (the rules) or, with example, what the example scorers compute
// from the source data the score was read at: two points per activity
// document at or before refreshedAt plus their points.
func verify(ctx context.Context, svc *app.Service, b *backlog, example bool, out io.Writer) error {
	var docs []scoring.ScoreDoc
	var activity []struct {
		User   string        `bson:"username"`
		Points bson.RawValue `bson:"points"`
		At     time.Time     `bson:"at"`
	}
	err := readAll(ctx, svc.DB.Collection("user_scores"), "scores", &docs)
	if err == nil && example {
		err = readAll(ctx, svc.DB.Collection("user_activity"), "user_activity", &activity)
	}
	if err != nil {
		return err
	}
	got := map[string]scoring.ScoreDoc{}
	for _, d := range docs {
		got[d.Username] = d
	}
	events, points := map[string]float64{}, map[string]float64{}
	for _, a := range activity {
		if d, ok := got[a.User]; ok && !a.At.After(d.RefreshedAt) {
			p, _ := a.Points.AsFloat64OK()
			events[a.User]++
			points[a.User] += p
		}
	}
	wrong := 0
	for user, want := range b.want {
		d, ok := got[user]
		problem := fmt.Sprintf("scored %v, want %v", d.Score, want)
		if example {
			want = 2*events[user] + points[user]
			problem = fmt.Sprintf("scored %v %v, want %v (events %v, points %v)", d.Score, d.Components, want, events[user], points[user])
			ok = ok && d.Components["events"] == events[user] && !(math.Abs(d.Components["points"]-points[user]) > 1e-9)
		}
		if !ok || math.Abs(d.Score-want) > 1e-9 {
			if wrong < 5 {
				fmt.Fprintf(out, "  WRONG: %s %s\n", user, problem)
			}
			wrong++
		}
	}
	if wrong > 0 {
		return fmt.Errorf("%d of %d scores are wrong", wrong, len(b.want))
	}
	fmt.Fprintf(out, "verified: all %d scores equal %s\n", len(b.want),
		map[bool]string{false: "the sum of their seeded activity", true: "the example scorer's (2 per activity document plus its points)"}[example])
	return nil
}

// readAll reads every document of coll into docs, what naming it in the error.
func readAll(ctx context.Context, coll *mongo.Collection, what string, docs any) error {
	cur, err := coll.Find(ctx, bson.D{})
	if err == nil {
		err = cur.All(ctx, docs)
	}
	if err != nil {
		return fmt.Errorf("reading %s to verify: %w", what, err)
	}
	return nil
}

// untilDrained prints a progress line a second, from start, until the queue
// is empty (the time it was seen so), ctx ends (zero) or the service stops on
// its own (its error).
func untilDrained(ctx context.Context, svc *app.Service, out io.Writer, start time.Time, done <-chan error) (time.Time, error) {
	tick, queue := time.Tick(time.Second), queuestate.New(svc.Colls.Queue, nil)
	lastAcked, lastUsers, last := 0.0, 0.0, start
	for {
		select {
		case <-ctx.Done():
			return time.Time{}, nil
		case err := <-done:
			return time.Time{}, errors.Join(errors.New("the service stopped before the queue drained"), err)
		case now := <-tick:
			st, err := queue.Read(ctx)
			if err != nil {
				fmt.Fprintf(out, "%6.1fs  (queue unreadable: %v)\n", now.Sub(start).Seconds(), err)
				continue
			}
			acked := metrics.Read(svc.Metrics.EntriesAcked)
			users := metrics.Read(svc.Metrics.Refreshes.WithLabelValues(metrics.OutcomeOK))
			dt := now.Sub(last).Seconds()
			fmt.Fprintf(out, "%6.1fs  depth %6d  oldest %7.1fs  %8.1f entries/s  %6.1f users/s  in flight %3.0f\n",
				now.Sub(start).Seconds(), st.Depth, st.OldestAge(now).Seconds(), (acked-lastAcked)/dt, (users-lastUsers)/dt,
				metrics.Read(svc.Metrics.UsersInFlight))
			lastAcked, lastUsers, last = acked, users, now
			if st.Depth == 0 {
				return now, nil
			}
		}
	}
}

// summary prints what a drain of secs did.
func summary(svc *app.Service, out io.Writer, secs float64, entries, users int) {
	m := svc.Metrics
	acked := metrics.Read(m.EntriesAcked)
	refreshes := metrics.Read(m.Refreshes.WithLabelValues(metrics.OutcomeOK))
	fmt.Fprintf(out, "\ndrained %d entries of %d users in %.1fs: %.0f entries/s, %.1f users/s\n",
		entries, users, secs, acked/secs, refreshes/secs)
	fmt.Fprintf(out, "refreshes %.0f ok, %.0f failed; coalescing factor %.1f entries per refresh; OCC conflicts %.0f; dead letters %.0f\n",
		refreshes, metrics.Read(m.Refreshes.WithLabelValues(metrics.OutcomeError)), acked/math.Max(refreshes, 1),
		metrics.Read(m.OCCConflicts),
		metrics.Read(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMalformed))+metrics.Read(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonMaxAttempts))+
			metrics.Read(m.EntriesDeadLettered.WithLabelValues(metrics.ReasonTooLarge)))
	// The MongoDB round trips by command, per acknowledged entry.
	if mfs, err := svc.Registry.Gather(); err == nil {
		fmt.Fprint(out, "MongoDB commands (count, total server+network time):")
		total := 0.0
		for _, mf := range mfs {
			if mf.GetName() == "scorerefresh_mongo_command_duration_seconds" {
				for _, m := range mf.GetMetric() {
					h := m.GetHistogram()
					total += float64(h.GetSampleCount())
					fmt.Fprintf(out, " %s %d/%.1fs", m.GetLabel()[0].GetValue(), h.GetSampleCount(), h.GetSampleSum())
				}
			}
		}
		fmt.Fprintf(out, "; %.2f per entry\n", total/math.Max(acked, 1))
	}
	fmt.Fprintln(out, "(the progress line's counters are approximate: a line shows the entries acknowledged in that second, in flushes of up to 100 users)")
}
