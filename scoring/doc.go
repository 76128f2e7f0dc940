// Package scoring turns a user's source documents into a score document:
// Rules (rules.go) name the components of a score, each one weighted
// aggregation (count, sum, max, min, avg or distinct) over one source
// collection; a Recomputer (recompute.go) runs one query per component, for
// one user or a batch; a Store (store.go, batch_store.go) writes the results
// to user_scores under optimistic concurrency, so concurrent refreshers never
// lose a write and an older recompute never replaces a newer one; a
// Refresher (refresher.go), what the consumer calls, does both in turn.
package scoring
