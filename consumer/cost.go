package consumer

import "time"

// What the pipeline costs, exported so the capacity model (the live
// headroom, the planner and the bench) reads the consumer's own figures
// instead of restating them. Tests of the claim and ack paths count these
// round trips against the commands the server receives.
const (
	// LeadFactor bounds held users to this many per refresh slot: one
	// running and three waiting keep every slot busy across a claim
	// round's latency, and with the defaults (16 × 4 = 64) it is exactly
	// MAX_USERS_IN_FLIGHT.
	LeadFactor = 4
	// ClaimRoundTrips is a claim round that claims: live leases, the
	// window, the lease insert, absorbing the window's entries.
	ClaimRoundTrips = 4
	// EmptyClaimRoundTrips is a round that found nobody to claim: it stops
	// after the window.
	EmptyClaimRoundTrips = 2
	// AckRoundTrips is one flush: delete the entries, release the leases.
	AckRoundTrips = 2
	// AckFlushInterval is how long a flush waits for company after its
	// first outcome.
	AckFlushInterval = 50 * time.Millisecond
	// AckFlushBatch outcomes make a flush go at once.
	AckFlushBatch = 100
)
