package consumer

import "time"

// What the pipeline costs, for the capacity model (the live headroom, the
// planner and the bench). Tests count these round trips against the server's.
const (
	// LeadFactor bounds held users per refresh slot: one running and three
	// waiting keep it busy across a claim round (16 × 4 = MAX_USERS_IN_FLIGHT).
	LeadFactor = 4
	// ClaimRoundTrips is a claim round that claims: live leases, the
	// window, the lease insert, absorbing the window's entries.
	ClaimRoundTrips = 4
	// EmptyClaimRoundTrips is a round that found nobody to claim.
	EmptyClaimRoundTrips = 2
	// AckRoundTrips is one flush: delete the entries, release the leases.
	AckRoundTrips = 2
	// AckFlushInterval is how long a flush waits for company after its first outcome.
	AckFlushInterval = 50 * time.Millisecond
	// AckFlushBatch outcomes make a flush go at once.
	AckFlushBatch = 100
)
