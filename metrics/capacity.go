package metrics

// DrainRate is what refresh slots acknowledge per second with every slot
// busy: slots × users per batch ÷ a batch's seconds × entries acknowledged
// per user refresh (0 when any is unknown). A slot holds one batch, of one
// user or several. The live headroom (scorerefresh_drain_capacity), the
// planner's bounds and the bench's estimate are this one formula; it lives
// here because the consumer, which the planner reads its costs from,
// imports this package.
func DrainRate(slots, usersPerBatch, batchSeconds, entriesPerUser float64) float64 {
	if slots <= 0 || usersPerBatch <= 0 || batchSeconds <= 0 || entriesPerUser <= 0 {
		return 0
	}
	return slots * usersPerBatch / batchSeconds * entriesPerUser
}
