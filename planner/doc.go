// Package planner predicts how scorerefresh drains a backlog: drain time, the
// oldest entry's age over time, the highest arrival rate a fleet sustains,
// the replica count that keeps the oldest age under a target, and whether a
// transient (slower round trips for a while, or a burst of entries) leaves
// the queue in a state it does not come back from.
//
// It talks to no database. The consumer's costs (round trips per claim
// round and flush, the flush's wait and size, the lead factor) are the
// consumer's own constants (consumer/cost.go), its batch spreading is
// consumer.SpreadBatch, and the capacity formula is metrics.DrainRate, the
// one the live headroom uses. The model:
//
//   - A refresh costs Components + 2 round trips (one query per component,
//     the score read and the score write); a batched recompute of B users
//     costs the same for the whole batch.
//   - Each replica runs REFRESH_CONCURRENCY batches at once, spreading the
//     users waiting over the free slots (each takes the waiting divided by
//     the free slots, rounded up, at most REFRESH_BATCH_SIZE), and holds at
//     most min(MAX_USERS_IN_FLIGHT, 4 × REFRESH_CONCURRENCY ×
//     REFRESH_BATCH_SIZE) users, from claim to acknowledgement.
//   - A claim round costs 4 round trips (live leases, the window, the lease
//     insert, absorb); it reads the CLAIM_WINDOW oldest entries of users
//     nobody holds, picks distinct users in order of their oldest entry,
//     and absorbs every pending entry of each user it won, so one refresh
//     acknowledges them all (coalescing). A replica claims again at once
//     while the window keeps yielding work and fewer users wait than it has
//     slots; otherwise on a poll tick or, with change streams, on arrivals.
//   - Outcomes are acknowledged in flushes of 2 round trips, 50 ms after the
//     first outcome or at once with 100 waiting; a user leaves the replica's
//     hands when its flush is done.
//   - A round trip takes RTT + the server's time per command; a server with a
//     capacity of Q commands a second makes n commands in flight take at
//     least n/Q each; a server that degrades under load (a knee) adds Slope
//     per command in flight beyond Knee.
//
// Two tools use that model. Simulate is a discrete-event simulation of the
// fleet over the backlog's own entries (users and enqueue times), which gives
// the timelines. The closed forms (Bounds, Demand, SustainableRate, Verdict)
// give the first-principles figures: the latency, server and in-flight
// bounds, the refresh demand an arrival rate makes once coalescing is
// counted, and the fixed points that decide stability. Plan runs both for
// 1…N replicas.
package planner
