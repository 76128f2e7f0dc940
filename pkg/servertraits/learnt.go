package servertraits

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Feature names something a server may refuse as not implemented although
// its version promises it: once refused, the service records it here and
// takes the way round. These are learnt, not probed: no reply to buildInfo
// or hello lists them.
type Feature string

const (
	// AccumulatorMax is $group's $max accumulator, which FerretDB 1.24
	// lacks: max components then read one sorted find per user.
	AccumulatorMax Feature = "$max accumulator"
	// AccumulatorMin and AccumulatorAvg: likewise (it has $sum and $count).
	AccumulatorMin Feature = "$min accumulator"
	AccumulatorAvg Feature = "$avg accumulator"
	// TTLIndexes is createIndexes' expireAfterSeconds, which FerretDB 1.24
	// refuses: consumer.EnsureIndexes then builds those indexes without it.
	TTLIndexes Feature = "TTL indexes"
	// PartialIndexes is createIndexes' partialFilterExpression, which
	// FerretDB 1.24 refuses: consumer.EnsureIndexes skips those indexes.
	PartialIndexes Feature = "partial indexes"
)

// BatchedShape names the batched query of a scoring op (one aggregation over
// a batch of users), which a server may refuse while it answers per user.
func BatchedShape(op string) Feature { return Feature("batched " + op) }

// learnt is what the server refused: Feature → *atomic.Bool.
type learnt struct{ flags sync.Map }

// Learnt returns the flag recording that the server refused f, which hot
// paths keep and read without a lock; CompareAndSwap(false, true) tells the
// first to learn it (the one that logs it).
func (l *learnt) Learnt(f Feature) *atomic.Bool {
	b, ok := l.flags.Load(f)
	if !ok {
		b, _ = l.flags.LoadOrStore(f, new(atomic.Bool))
	}
	return b.(*atomic.Bool)
}

func (l *learnt) Lacks(f Feature) bool { return l.Learnt(f).Load() }

// Refused records that the server refused f and reports whether this is
// the first time since the last Reprobe that found other software.
func (l *learnt) Refused(f Feature) (first bool) { return l.Learnt(f).CompareAndSwap(false, true) }

// Lacking lists the features the server has refused, sorted.
func (l *learnt) Lacking() []Feature {
	var out []Feature
	l.flags.Range(func(f, b any) bool {
		if b.(*atomic.Bool).Load() {
			out = append(out, f.(Feature))
		}
		return true
	})
	slices.Sort(out)
	return out
}

// forget clears every flag in place: their holders see the change.
func (l *learnt) forget() {
	l.flags.Range(func(_, b any) bool {
		b.(*atomic.Bool).Store(false)
		return true
	})
}
