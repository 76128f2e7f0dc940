package scoring

import "slices"

// Limits on one batch; a larger batch is split into chunks of their own.
const (
	// MaxBatchUsers bounds the users in one batched command: the work, so the latency, every user waits for.
	MaxBatchUsers = 64
	// maxBatchNameBytes bounds the usernames a batched command carries (at most twice: $in, or a
	// bulk write's filters and documents), far below the 16 MiB command limit however long the names.
	maxBatchNameBytes = 1 << 20
	batchNameOverhead = 16 // BSON framing around a name (type, index key, length, terminator)
)

// uniqueUsers returns users without repeats, in first-seen order.
func uniqueUsers(users []string) []string {
	seen := make(map[string]bool, len(users))
	return slices.DeleteFunc(slices.Clone(users), func(u string) bool {
		dup := seen[u]
		seen[u] = true
		return dup
	})
}

// chunkUsers splits users, in order, into chunks of at most maxUsers users
// and maxBytes bytes of names (a single longer name gets a chunk of its own).
func chunkUsers(users []string, maxUsers, maxBytes int) [][]string {
	var chunks [][]string
	var cur []string
	size := 0
	for _, u := range users {
		n := len(u) + batchNameOverhead
		if len(cur) > 0 && (len(cur) == maxUsers || size+n > maxBytes) {
			chunks = append(chunks, cur)
			cur, size = nil, 0
		}
		cur = append(cur, u)
		size += n
	}
	if len(cur) > 0 {
		chunks = append(chunks, cur)
	}
	return chunks
}

// sortedChunks is users sorted, without repeats, then chunked: the order in which userLocks.lock takes them.
func sortedChunks(users []string) [][]string {
	return chunkUsers(slices.Compact(slices.Sorted(slices.Values(users))), MaxBatchUsers, maxBatchNameBytes)
}
