// Package scoring turns a user's source documents into a score document: Rules (rules.go) name its
// components, each a weighted aggregation over one source collection; a Recomputer (recompute.go)
// runs one query per component, for a user or a batch; a Store (store.go, batch_store.go) writes to
// user_scores under optimistic concurrency, so no write is lost and an older recompute never
// replaces a newer one; a Refresher (refresher.go), what the consumer calls, does both.
package scoring
