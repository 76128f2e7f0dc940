package planner

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/scorerefresh/scorerefresh/consumer"
)

// Input is what to plan.
type Input struct {
	Backlog     *Backlog
	Arrival     Arrival
	Config      Config // Replicas: the fleet as it runs now
	Server      Server
	MaxReplicas int     // the table covers 1…MaxReplicas
	TargetAge   float64 // seconds the oldest entry may wait
	Transient   Transient
}

// Validate reports every bad input at once.
func (in Input) Validate() error {
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	c, s, a, t := in.Config, in.Server, in.Arrival, in.Transient
	names := []string{"components", "REFRESH_CONCURRENCY", "MAX_USERS_IN_FLIGHT", "CLAIM_WINDOW", "replicas", "batch"}
	for i, v := range []int{c.Components, c.Concurrency, c.MaxUsersInFlight, c.ClaimWindow, c.Replicas, c.Batch} {
		check(v <= 0, "%s must be positive (got %d)", names[i], v)
	}
	check(c.Concurrency > c.MaxUsersInFlight && c.MaxUsersInFlight > 0, "REFRESH_CONCURRENCY %d is above MAX_USERS_IN_FLIGHT %d", c.Concurrency, c.MaxUsersInFlight)
	check(c.PollInterval <= 0, "poll interval must be positive (got %gs)", c.PollInterval)
	check(!(s.RTT >= 0) || !(s.Cost >= 0) || !(s.Capacity >= 0) || !(s.Slope >= 0) || s.Knee < 0 || !(s.EntryCost >= 0) || !(s.ScanCost >= 0),
		"RTT, server cost, capacity, knee, slope, entry and scan costs must not be negative")
	check(s.RTT+s.Cost <= 0, "a round trip must take some time: give an RTT or a server cost")
	check(a.Mode != ArrivalMax && a.Mode != ArrivalOriginal && a.Mode != ArrivalRate, "unknown arrival %q: want %s, %s or %s", a.Mode, ArrivalMax, ArrivalOriginal, ArrivalRate)
	check(a.Mode == ArrivalOriginal && !(a.Speed > 0), "arrival original: speed must be positive (got %g)", a.Speed)
	check(a.Mode == ArrivalRate && (!(a.Rate > 0) || !(a.Duration > 0)), "arrival rate: rate and duration must be positive (got %g/s for %gs)", a.Rate, a.Duration)
	check(in.Backlog == nil, "no backlog")
	check(in.MaxReplicas < 1, "max replicas must be at least 1 (got %d)", in.MaxReplicas)
	check(!(in.TargetAge > 0), "target age must be positive (got %gs)", in.TargetAge)
	check(t.At < 0 || t.For < 0 || t.Burst < 0 || (t.RTTFactor != 0 && t.RTTFactor < 1),
		"transient: time, duration and burst must not be negative, and the RTT factor at least 1")
	check(t.Active() && a.Mode == ArrivalRate && t.End() >= a.Duration,
		"transient: it must end (at %s) before the arrivals do (%s), or there is no load left to judge the recovery under", Seconds(t.End()), Seconds(a.Duration))
	return errors.Join(errs...)
}

// Plan is the planner's answer.
type Plan struct {
	Entries           int            `json:"entries"`
	Users             int            `json:"users"`
	SpanSecs          float64        `json:"spanSeconds"` // oldest to newest entry of the backlog
	Arrival           Arrival        `json:"arrival"`
	Load              float64        `json:"loadEntriesPerSecond"` // arrivals after the start (mean)
	Config            Config         `json:"config"`
	Server            Server         `json:"server"`
	TargetAge         float64        `json:"targetAgeSeconds"`
	Transient         Transient      `json:"transient"`
	RoundTrips        int            `json:"roundTripsPerRefresh"`
	EntriesPerUser    float64        `json:"entriesPerUser"` // a static drain's coalescing
	WindowUsers       float64        `json:"windowUsers"`    // distinct users per CLAIM_WINDOW entries
	Mix               Mix            `json:"mix"`
	Sequential        *Sequential    `json:"sequential,omitempty"`
	Rows              []Row          `json:"replicas"`
	ReplicasForTarget int            `json:"replicasForTarget"` // the fewest whose simulated peak wait is within TargetAge; 0: none up to MaxReplicas
	Stability         *StabilityPlan `json:"stability"`
}

// Row is one fleet size.
type Row struct {
	Replicas    int    `json:"replicas"`
	Bounds      Bounds `json:"bounds"`
	Run         *Run   `json:"simulation"`
	Sustainable Limit  `json:"sustainableEntriesPerSecond"` // the highest arrival rate, with the backlog's mix of users, within the target age
	MeetsTarget bool   `json:"meetsTarget"`
}

// StabilityPlan is the verdict on a transient at the current fleet size.
type StabilityPlan struct {
	Replicas        int       `json:"replicas"`
	Assessment      Stability `json:"assessment"`
	Baseline        *Run      `json:"baseline,omitempty"`  // the load without the transient
	Disturbed       *Run      `json:"disturbed,omitempty"` // the same with it
	PreLevel        float64   `json:"preLevelSeconds"`     // the oldest age before the transient (its highest over the last two thirds before it): recovery's goal
	Recovered       bool      `json:"recovered"`
	RecoverySeconds float64   `json:"recoverySeconds"` // after the transient ended; -1: not while the load lasted
	Verdict         string    `json:"verdict"`
}

// Make runs the plan.
func Make(in Input) (*Plan, error) {
	if err := in.Validate(); err != nil {
		return nil, err
	}
	b := in.Backlog
	p := &Plan{Entries: len(b.Entries), Users: b.Users, Arrival: in.Arrival, Config: in.Config,
		Server: in.Server, TargetAge: in.TargetAge, Transient: in.Transient, RoundTrips: in.Config.RoundTrips(),
		Mix: NewMix(b.Counts()), WindowUsers: windowUsers(b, in.Config.ClaimWindow)}
	if n := len(b.Entries); n > 0 {
		p.SpanSecs, p.EntriesPerUser = b.Entries[n-1].Created-b.Entries[0].Created, float64(n)/float64(b.Users)
	}
	switch in.Arrival.Mode { // the mean arrival rate after the start
	case ArrivalRate:
		p.Load = in.Arrival.Rate
	case ArrivalOriginal:
		if p.SpanSecs > 0 {
			p.Load = float64(len(b.Entries)) / (p.SpanSecs / in.Arrival.Speed)
		}
	}
	p.Sequential = sequential(b, in.Config, in.Server, p.Load)
	entries, users := b.Schedule(in.Arrival, Transient{})
	for n := 1; n <= in.MaxReplicas; n++ {
		c := in.Config
		c.Replicas = n
		row := Row{Replicas: n, Bounds: FleetBounds(c, in.Server, n)}
		row.Run = Simulate(c, in.Server, Transient{}, entries, users, simOptions(in, entries, row.Bounds))
		// An entry may wait for its claim what the target age leaves after busyTime.
		wait := math.Max(in.TargetAge-busyTime(c, in.Server), in.TargetAge/10)
		row.Sustainable = Limit(p.Mix.SustainableRate(row.Bounds.Lower, wait))
		row.MeetsTarget = row.Run.PeakWait <= in.TargetAge && (row.Run.Drained || in.Arrival.Mode == ArrivalRate)
		if row.MeetsTarget && p.ReplicasForTarget == 0 {
			p.ReplicasForTarget = n
		}
		p.Rows = append(p.Rows, row)
	}
	p.Stability = stability(in, p, entries, users)
	return p, nil
}

// simOptions runs a simulation to the end of a rate's arrivals, else until
// drained, with a horizon well past what the bounds predict.
func simOptions(in Input, entries []Entry, b Bounds) SimOptions {
	o := SimOptions{Horizon: in.Arrival.Duration}
	if in.Arrival.Mode != ArrivalRate {
		est := float64(len(entries)) / math.Max(b.Lower, 1e-6)
		if len(entries) > 0 {
			est += entries[len(entries)-1].Arrive
		}
		o.Horizon, o.UntilDrained = math.Min(math.Max(3*est, est+300), 14*24*3600), true
	}
	o.SampleEvery = math.Max(1, math.Ceil(o.Horizon/2000)) // enough for a chart
	return o
}

// busyTime is an entry's time from its claim round to its ack while the fleet
// keeps up: the round, the refresh, the ack flush's wait and round trips.
func busyTime(c Config, s Server) float64 {
	return float64(c.RoundTrips()+consumer.ClaimRoundTrips+consumer.AckRoundTrips)*s.Latency(1, 1) + ackInterval
}

// stability classifies the load and simulates the transient at the current fleet.
func stability(in Input, p *Plan, entries []Entry, users int) *StabilityPlan {
	c, tr := in.Config, in.Transient
	sp := &StabilityPlan{Replicas: c.Replicas, RecoverySeconds: -1}
	backlogUsers := 0
	if in.Arrival.Mode == ArrivalRate {
		backlogUsers = in.Backlog.Users
	}
	sp.Assessment = Assess(c, in.Server, c.Replicas, p.Mix, p.Load, backlogUsers)
	if !tr.Active() {
		sp.Verdict = sp.Assessment.Describe()
		return sp
	}
	end, o := tr.End(), simOptions(in, entries, FleetBounds(c, in.Server, c.Replicas))
	if in.Arrival.Mode != ArrivalRate {
		// Until drained, with room for the transient's delay.
		o.Horizon = math.Max(o.Horizon, end+600)
		if tr.RTTFactor > 1 {
			o.Horizon += tr.For * tr.RTTFactor
		}
	}
	sp.Baseline = Simulate(c, in.Server, Transient{}, entries, users, o)
	dEntries, dUsers := in.Backlog.Schedule(in.Arrival, tr)
	d := Simulate(c, in.Server, tr, dEntries, dUsers, o)
	sp.Disturbed, sp.PreLevel = d, peak(d.Timeline, tr.At/3, tr.At).OldestAge
	loadEnd := end
	if n := len(entries); n > 0 {
		loadEnd = math.Max(loadEnd, entries[n-1].Arrive)
	}
	if t, ok := RecoveredAt(d.Timeline, sp.PreLevel, end, loadEnd, p.Load > 0); ok {
		sp.Recovered, sp.RecoverySeconds = true, t-end
	}
	if p.Load == 0 && d.Drained {
		sp.Recovered, sp.RecoverySeconds = true, d.DrainSeconds-end
	}
	pk := peak(d.Timeline, tr.At, math.Inf(1))
	at := d.Timeline[sort.Search(len(d.Timeline), func(i int) bool { return d.Timeline[i].T > loadEnd })-1] // the last sample of the load
	verdict := fmt.Sprintf("does NOT recover while the load lasts: %s after the transient ends the oldest age is %s (it was %s before), depth %d",
		Seconds(at.T-end), Seconds(at.OldestAge), Seconds(sp.PreLevel), at.Depth)
	switch {
	case p.Load == 0 && sp.Recovered:
		verdict = fmt.Sprintf("no arrivals after the backlog: the transient delays the drain to %s (from %s)", Seconds(d.DrainSeconds), Seconds(sp.Baseline.DrainSeconds))
	case sp.Recovered:
		verdict = fmt.Sprintf("recovers: the oldest age is back to its pre-transient %s %s after the transient ends (from the transient on: peak depth %d, peak oldest age %s)",
			Seconds(sp.PreLevel), Seconds(sp.RecoverySeconds), pk.Depth, Seconds(pk.OldestAge))
	}
	// A fleet keeping up holds the oldest age at about busyTime, plus a poll without change streams.
	light := busyTime(c, in.Server)
	if !c.ChangeStreams {
		light += c.PollInterval
	}
	sp.Verdict = When(sp.PreLevel > 2*light+1, "the queue is already backed up before the transient (oldest age %s where a fleet keeping up holds about %s): ",
		Seconds(sp.PreLevel), Seconds(light)) + verdict +
		When(in.Arrival.Mode == ArrivalRate && (sp.Baseline.ClearSeconds < 0 || sp.Baseline.ClearSeconds > tr.At),
			" (the backlog present at the start is not cleared by %s, when the transient begins:"+
				" the verdict compares against a queue still draining; a --transient-at after the backlog is cleared judges the steady state)", Seconds(tr.At))
	return sp
}

// RecoveredAt is the first sample time from restore on whose oldest age is
// back within 0.5 s of level (an idle queue's age swings by up to a poll
// interval, and the level is that swing's top); with whileLoaded, up to
// loadEnd only: a queue that drains because arrivals stopped has not recovered.
func RecoveredAt(tl []Sample, level, restore, loadEnd float64, whileLoaded bool) (float64, bool) {
	for _, s := range tl {
		if s.T >= restore && (!whileLoaded || s.T <= loadEnd) && s.OldestAge <= level+0.5 {
			return s.T, true
		}
	}
	return 0, false
}

// peak is the highest depth, oldest age and wait of the samples in [from, to).
func peak(tl []Sample, from, to float64) (p Sample) {
	for _, s := range tl {
		if s.T >= from && s.T < to {
			p.Depth, p.OldestAge, p.Wait = max(p.Depth, s.Depth), math.Max(p.OldestAge, s.OldestAge), math.Max(p.Wait, s.Wait)
		}
	}
	return p
}

// windowUsers is the mean count of distinct users in consecutive windows of w entries.
func windowUsers(b *Backlog, w int) float64 {
	if len(b.Entries) == 0 || w <= 0 {
		return 0
	}
	seen, total, windows := map[int32]struct{}{}, 0, 0
	for i, e := range b.Entries {
		seen[e.User] = struct{}{}
		if (i+1)%w == 0 || i == len(b.Entries)-1 {
			total += len(seen)
			windows++
			clear(seen)
		}
	}
	return float64(total) / float64(windows)
}

// SequentialWindow is the entries the consumer scorerefresh replaced read per poll.
const SequentialWindow = 200

// Sequential is, for comparison, a consumer that reads the oldest
// SequentialWindow entries, refreshes their users one after another, then
// deletes the window: a diverse backlog slows it and so stays diverse (it wedges).
type Sequential struct {
	WindowUsers      float64 `json:"windowUsers"`      // distinct users per window, on average
	EntriesPerSecond float64 `json:"entriesPerSecond"` // its drain rate on this backlog
	KeepsUp          bool    `json:"keepsUp"`          // false without a load
}

func sequential(b *Backlog, c Config, s Server, load float64) *Sequential {
	if len(b.Entries) == 0 {
		return nil
	}
	q, lat := &Sequential{WindowUsers: windowUsers(b, SequentialWindow)}, s.Latency(1, 1)
	perWindow := q.WindowUsers*float64(c.RoundTrips())*lat + 2*lat // read the window, delete it
	q.EntriesPerSecond = min(float64(SequentialWindow), float64(len(b.Entries))) / perWindow
	q.KeepsUp = load > 0 && q.EntriesPerSecond > load
	return q
}

// WriteText prints the plan for a person: inputs, table, target, stability.
func (p *Plan) WriteText(w io.Writer) error {
	var b strings.Builder
	a, s, c := p.Arrival, p.Server, p.Config
	fmt.Fprintf(&b, "backlog: %s entries of %s users over %s (%.1f entries per user; %.0f distinct users per %d-entry window)\n",
		Thousands(p.Entries), Thousands(p.Users), Seconds(p.SpanSecs), p.EntriesPerUser, p.WindowUsers, c.ClaimWindow)
	b.WriteString(When(a.Mode == ArrivalMax, "arrival: max (the backlog is in the queue at the start; nothing follows)\n") +
		When(a.Mode == ArrivalOriginal, "arrival: original ×%g (%.1f entries/s on average over %s)\n", a.Speed, p.Load, Seconds(p.SpanSecs/a.Speed)) +
		When(a.Mode == ArrivalRate, "arrival: the backlog, then %.1f entries/s for %s (%.0f%% of them from users the backlog has not seen)\n",
			a.Rate, Seconds(a.Duration), 100*p.Mix.New))
	fmt.Fprintf(&b, "round trip: RTT %s + server %s per command", ms(s.RTT), ms(s.Cost))
	b.WriteString(When(s.Capacity > 0, "; server capacity %.0f commands/s", s.Capacity) +
		When(s.Slope > 0, "; +%s per command in flight past %d", ms(s.Slope), s.Knee) +
		When(s.EntryCost > 0, "; %.0fµs per entry an ack deletes", s.EntryCost*1e6) +
		When(s.ScanCost > 0, "; %.1fµs per queued entry per claim read", s.ScanCost*1e6))
	fmt.Fprintf(&b, "\nrefresh: %d component%s + 2 = %d round trips", c.Components, When(c.Components != 1, "s"), p.RoundTrips)
	b.WriteString(When(c.Batch > 1, " per batch of up to %d users spread over the free slots (%d with every slot busy)", c.Batch, c.SpreadBatch()))
	fmt.Fprintf(&b, "\nconfig: REFRESH_CONCURRENCY %d, MAX_USERS_IN_FLIGHT %d, CLAIM_WINDOW %d, %d replica(s) now; wake-up: %s\n\n",
		c.Concurrency, c.MaxUsersInFlight, c.ClaimWindow, c.Replicas, cmp.Or(When(c.ChangeStreams, "change streams"), "poll every "+Seconds(c.PollInterval)))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "replicas\tbound/s\tbinding\t%s\tpeak depth\tpeak oldest age\tpeak wait\trefreshes/s\tsustainable/s\t\n",
		cmp.Or(When(a.Mode == ArrivalRate, "backlog cleared"), "drain"))
	for _, r := range p.Rows {
		d := r.Run.DrainSeconds
		if a.Mode == ArrivalRate {
			d = r.Run.ClearSeconds
		}
		fmt.Fprintf(tw, "%d\t%.1f\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t\n", r.Replicas, r.Bounds.Lower, r.Bounds.Binding,
			cmp.Or(When(d < 0, "> %s", Seconds(r.Run.EndSeconds)), Seconds(d)), Thousands(r.Run.PeakDepth), Seconds(r.Run.PeakOldestAge),
			Seconds(r.Run.PeakWait), float64(r.Run.Refreshes)/r.Run.EndSeconds, cmp.Or(When(!math.IsInf(float64(r.Sustainable), 1), "%.1f", r.Sustainable), "any"))
	}
	tw.Flush()
	fmt.Fprintf(&b, "(bound: refreshes/s with every slot busy; peak wait: the longest an entry waited since the plan began;\n"+
		" sustainable: the highest arrival rate, with this backlog's mix of users, that keeps the oldest age within %s)\n\n", Seconds(p.TargetAge))
	n := len(p.Rows)
	why := cmp.Or(When(n > 1 && p.Rows[n-1].Bounds.Lower < 1.05*p.Rows[n-2].Bounds.Lower,
		"the last replica added less than 5%%: the server, not the fleet, is the limit"), "try a larger --max-replicas")
	fmt.Fprintf(&b, "replicas for an oldest age within %s: %s\n", Seconds(p.TargetAge),
		cmp.Or(When(p.ReplicasForTarget > 0, "%d", p.ReplicasForTarget), fmt.Sprintf("more than %d (%s)", n, why)))
	if q := p.Sequential; q != nil {
		fmt.Fprintf(&b, "for comparison, a one-at-a-time consumer (%d-entry window, %.0f distinct users in it) would drain %.1f entries/s here%s\n",
			SequentialWindow, q.WindowUsers, q.EntriesPerSecond, When(p.Load > 0 && !q.KeepsUp, ": below the load, so it would wedge"))
	}
	sp, t := p.Stability, p.Transient
	fmt.Fprintf(&b, "\nstability at %d replica(s)%s:\n  %s\n", sp.Replicas, When(p.Load > 0, ", load %.1f entries/s", p.Load), sp.Assessment.Describe())
	if t.Active() {
		slower := When(t.RTTFactor > 1 && t.For > 0, "round trips ×%g for %s", t.RTTFactor, Seconds(t.For))
		burst := When(t.Burst > 0, "a burst of %s entries of new users", Thousands(t.Burst))
		fmt.Fprintf(&b, "  transient (%s%s%s at %s): %s\n", slower, When(slower != "" && burst != "", " and "), burst, Seconds(t.At), sp.Verdict)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// When is format's text when cond holds, else "".
func When(cond bool, format string, args ...any) string {
	if !cond {
		return ""
	}
	return fmt.Sprintf(format, args...)
}

// Thousands formats n with comma separators: 20,000 reads faster than 20000.
func Thousands[N ~int | ~int64](n N) string {
	s := strconv.FormatInt(int64(n), 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func ms(s float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", s*1000), "0"), ".") + "ms"
}

// Entry is one queue entry as the model sees it, in seconds from the plan's start.
type Entry struct {
	User    int32   `json:"user"`
	Created float64 `json:"created"` // enqueue time; negative: it was waiting already
	Arrive  float64 `json:"arrive"`  // when it is in the queue (0 for a backlog)
}

// Backlog is a queue's entries, oldest first, with users numbered from 0;
// Add and Build fill it from a snapshot or the queue.
type Backlog struct {
	Users   int
	Names   []string // by number: the order Add first saw them
	Entries []Entry
	ids     map[string]int32
}

// Add records an entry of user enqueued at created.
func (b *Backlog) Add(user string, created time.Time) {
	id, ok := b.ids[user]
	if !ok {
		if b.ids == nil {
			b.ids = map[string]int32{}
		}
		id = int32(len(b.Names))
		b.ids[user], b.Names = id, append(b.Names, user)
	}
	// Seconds since the epoch until Build knows the reference.
	b.Entries = append(b.Entries, Entry{User: id, Created: float64(created.UnixNano()) / 1e9})
}

// Build puts the entries oldest first, their ages counted from ref.
func (b *Backlog) Build(ref time.Time) {
	r := float64(ref.UnixNano()) / 1e9
	for i := range b.Entries {
		b.Entries[i].Created -= r
	}
	slices.SortStableFunc(b.Entries, func(x, y Entry) int { return cmp.Compare(x.Created, y.Created) })
	b.Users = len(b.Names)
}

// Counts returns each user's number of entries.
func (b *Backlog) Counts() []int {
	n := make([]int, b.Users)
	for _, e := range b.Entries {
		n[e.User]++
	}
	return n
}

// The arrival profiles. Max: the backlog is in the queue at the start,
// nothing follows. Original: its entries arrive at their original spacing
// divided by Speed, each aged from its arrival (as a replay with --arrival
// original --shift-to-now stamps them). Rate: the backlog, then Rate entries
// a second for Duration seconds, their users drawn from the backlog's Mix.
const (
	ArrivalMax      = "max"
	ArrivalOriginal = "original"
	ArrivalRate     = "rate"
)

// Arrival is how entries reach the queue.
type Arrival struct {
	Mode     string  `json:"mode"`
	Speed    float64 `json:"speed,omitempty"`
	Rate     float64 `json:"rate,omitempty"`
	Duration float64 `json:"durationSeconds,omitempty"`
	Seed     uint64  `json:"seed,omitempty"`
}

// Schedule lays the backlog out in time under the profile, with the
// transient's burst, oldest first, and counts the users they name.
func (b *Backlog) Schedule(a Arrival, tr Transient) ([]Entry, int) {
	out, users := make([]Entry, 0, len(b.Entries)), b.Users
	for _, e := range b.Entries {
		created, arrive := min(e.Created, 0), 0.0
		if a.Mode == ArrivalOriginal {
			created = (e.Created - b.Entries[0].Created) / a.Speed
			arrive = created
		}
		out = append(out, Entry{User: e.User, Created: created, Arrive: arrive})
	}
	if a.Mode == ArrivalRate {
		rnd, unseen := rand.New(rand.NewPCG(a.Seed, 0x91a7)), NewMix(b.Counts()).New
		for k := range int(a.Rate * a.Duration) {
			t := float64(k+1) / a.Rate
			u := int32(users) // a user the backlog has not seen (see Mix)
			if rnd.Float64() < unseen {
				users++
			} else {
				u = b.Entries[rnd.IntN(len(b.Entries))].User
			}
			out = append(out, Entry{User: u, Created: t, Arrive: t})
		}
	}
	for range tr.Burst {
		out = append(out, Entry{User: int32(users), Created: tr.At, Arrive: tr.At})
		users++
	}
	slices.SortStableFunc(out, func(x, y Entry) int { return cmp.Compare(x.Created, y.Created) })
	return out, users
}
