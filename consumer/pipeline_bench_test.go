package consumer

import (
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Microbenchmarks of the pipeline's pure hot code, per claim round and per
// ack flush at the default sizes (CLAIM_WINDOW 500, MAX_USERS_IN_FLIGHT 64,
// ack batches of up to 100 users). Run with allocations:
//
//	go test -run '^$' -bench . -benchmem ./consumer
//
// docs/performance.md has the figures of this machine.

// benchWindow is a claim window of n entries over users distinct users,
// as the window query returns it (raw _id, username, createdAt).
func benchWindow(n, users int) []rawEntry {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	raw := make([]rawEntry, n)
	for i := range raw {
		at := start.Add(time.Duration(i) * time.Millisecond)
		raw[i] = rawEntry{
			ID:        rawValue(bson.NewObjectIDFromTimestamp(at)),
			Username:  rawValue(fmt.Sprintf("user-%05d", i%users)),
			CreatedAt: rawValue(at),
		}
	}
	return raw
}

func rawValue(v any) bson.RawValue {
	t, data, err := bson.MarshalValue(v)
	if err != nil {
		panic(err)
	}
	return bson.RawValue{Type: t, Value: data}
}

// BenchmarkPickUsers is building a claim batch: the oldest window of 500
// entries, up to 64 distinct users picked from it.
func BenchmarkPickUsers(b *testing.B) {
	for name, users := range map[string]int{"diverse": 500, "20users": 20, "firehose": 1} {
		b.Run(name, func(b *testing.B) {
			window := benchWindow(500, users)
			b.ReportAllocs()
			for b.Loop() {
				picked, bad, _ := distinctUsers(window)
				if len(picked) == 0 || len(bad) != 0 {
					b.Fatal(len(picked), len(bad))
				}
			}
		})
	}
}

// BenchmarkGroupByUser is coalescing a window: the absorbed entries of the
// users won, grouped into one batch per user.
func BenchmarkGroupByUser(b *testing.B) {
	for name, c := range map[string]struct{ entries, users int }{
		"64users_500entries":    {500, 64},
		"64users_5000entries":   {5000, 64},
		"1user_20000entries":    {20000, 1},
		"64users_64entries_new": {64, 64},
	} {
		b.Run(name, func(b *testing.B) {
			raw := benchWindow(c.entries, c.users)
			b.ReportAllocs()
			b.ReportMetric(float64(c.entries), "entries/op")
			for b.Loop() {
				byUser, _ := groupByUser(raw)
				if len(byUser) != c.users {
					b.Fatal(len(byUser))
				}
			}
		})
	}
}

// BenchmarkParseEntry is the per-entry validation every window and absorb
// runs.
func BenchmarkParseEntry(b *testing.B) {
	r := benchWindow(1, 1)[0]
	b.ReportAllocs()
	for b.Loop() {
		if _, m := parseEntry(r); m != nil {
			b.Fatal(m.Detail)
		}
	}
}

// BenchmarkEncodeAck is encoding one ack flush of 100 users: the delete
// statements of their entries (one {_id: x} filter each, 1 and 10 entries
// per user) and the lease release filter (fenceFilter), as the driver
// marshals them.
func BenchmarkEncodeAck(b *testing.B) {
	leases := make([]lease, 100)
	for i := range leases {
		leases[i] = lease{User: fmt.Sprintf("user-%05d", i), Token: fmt.Sprintf("%024x", i/50)}
	}
	for _, perUser := range []int{1, 10} {
		b.Run(fmt.Sprintf("entries_%dx100users", perUser), func(b *testing.B) {
			window := benchWindow(100*perUser, 100)
			b.ReportAllocs()
			for b.Loop() {
				ids := make(bson.A, 0, len(window))
				for _, r := range window {
					ids = append(ids, rawValueToAny(r.ID))
				}
				for _, m := range deleteStatements(ids) {
					if _, err := bson.Marshal(m.(*mongo.DeleteOneModel).Filter); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
	b.Run("fenceFilter_100leases", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bson.Marshal(fenceFilter(leases)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// rawValueToAny turns an _id into a value the driver encodes back to the
// identical BSON, so filters on it match the stored document.
func rawValueToAny(v bson.RawValue) any {
	if v.Type == 0 {
		return nil
	}
	return v
}
