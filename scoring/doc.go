// Package scoring turns a user's source documents into a score document.
//
// The pieces, in the order a refresh uses them:
//
//   - Rules (rules.go) say which components make up a score: each is one
//     aggregation (count, sum, max or distinct) over one source collection,
//     weighted. They come from a YAML or JSON file or the built-in default.
//   - A Recomputer (recompute.go) runs one query per component for one user,
//     or for a batch of users (batch_recompute.go).
//   - A Store (store.go) writes the result to user_scores under optimistic
//     concurrency, so concurrent refreshers never lose a write and an older
//     recompute never replaces a newer one; one user at a time, or a batch in
//     one read and one bulk write (batch_store.go).
//   - A Refresher (refresher.go) is what the consumer calls: recompute, then
//     write, for one user or a batch.
package scoring
