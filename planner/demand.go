package planner

import (
	"math"
	"slices"
)

// Mix is how arrivals spread over users, learnt from a backlog: user u's
// share of the entries, plus a share of entries from users the backlog has
// not seen. That share is the Good–Turing estimate: the fraction of the
// entries whose user appears only once. A snapshot of a diverse flow is
// mostly users seen once, so most future arrivals are new users, which
// coalesce with nothing; a firehose has almost none.
type Mix struct {
	groups []shareGroup // users with the same share, largest share first
	New    float64      `json:"new"` // share of arrivals from unseen users
	Users  int          `json:"users"`
}

type shareGroup struct {
	share float64 // of all arrivals, per user
	users int
}

// NewMix builds the mix from each user's number of entries.
func NewMix(counts []int) Mix {
	total, once := 0, 0
	byCount := map[int]int{}
	for _, n := range counts {
		if n <= 0 {
			continue
		}
		total += n
		byCount[n]++
		if n == 1 {
			once++
		}
	}
	m := Mix{Users: len(counts)}
	if total == 0 {
		m.New = 1
		return m
	}
	m.New = float64(once) / float64(total)
	for n, users := range byCount {
		m.groups = append(m.groups, shareGroup{share: (1 - m.New) * float64(n) / float64(total), users: users})
	}
	slices.SortFunc(m.groups, func(a, b shareGroup) int { return -cmpFloat(a.share, b.share) })
	return m
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Demand is the refreshes a second that rate entries a second need when an
// entry waits about wait seconds before its user is claimed. A user with r
// entries a second is refreshed once per cycle of 1/r (until its next entry)
// plus wait (until that entry is claimed), and the refresh acknowledges
// everything that user enqueued meanwhile: r / (1 + r·wait) refreshes a
// second. Unseen users' entries each cost a refresh.
func (m Mix) Demand(rate, wait float64) float64 {
	d := rate * m.New
	for _, g := range m.groups {
		r := rate * g.share
		d += float64(g.users) * r / (1 + r*wait)
	}
	return d
}

// SustainableRate is the highest arrival rate (entries a second) whose
// refresh demand, with entries waiting wait seconds, stays within capacity
// (refreshes a second). +Inf means no rate is too high: the mix has no
// unseen users and all its users are refreshed within wait anyway.
func (m Mix) SustainableRate(capacity, wait float64) float64 {
	if capacity <= 0 {
		return 0
	}
	if m.New == 0 && float64(m.Users)/math.Max(wait, 1e-9) <= capacity {
		return math.Inf(1)
	}
	lo, hi := 0.0, capacity
	for m.Demand(hi, wait) <= capacity {
		lo, hi = hi, hi*2
		if hi > 1e12 {
			return math.Inf(1)
		}
	}
	for range 100 {
		mid := (lo + hi) / 2
		if m.Demand(mid, wait) <= capacity {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// SettledWait is the wait at which rate's demand matches capacity: how old
// entries get before coalescing brings the demand down to what the fleet
// does. 0 when the fleet keeps up without a queue; +Inf when no wait is
// enough (unseen users alone need more than capacity).
func (m Mix) SettledWait(rate, capacity float64) float64 {
	if m.Demand(rate, 0) <= capacity {
		return 0
	}
	if rate*m.New >= capacity {
		return math.Inf(1)
	}
	lo, hi := 0.0, 1.0
	for m.Demand(rate, hi) > capacity {
		lo, hi = hi, hi*2
		if hi > 1e9 {
			return math.Inf(1)
		}
	}
	for range 100 {
		mid := (lo + hi) / 2
		if m.Demand(rate, mid) > capacity {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}
