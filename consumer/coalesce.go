package consumer

// pickUsers chooses which users to claim from the oldest window of claimable
// entries: distinct users in order of their oldest entry, at most max of them.
// The window is wider than the number of users on purpose: duplicates of the
// same user collapse into one pick, so a window of 500 entries with 20 users
// costs 20 refreshes, not 500.
func pickUsers(window []rawEntry, max int) (users []string, bad []malformed) {
	seen := make(map[string]struct{}, max)
	for _, r := range window {
		e, m := parseEntry(r)
		if m != nil {
			bad = append(bad, *m)
			continue
		}
		if _, dup := seen[e.Username]; dup || len(users) >= max {
			continue
		}
		seen[e.Username] = struct{}{}
		users = append(users, e.Username)
	}
	return users, bad
}

// groupByUser coalesces absorbed entries into one batch per user. Entries of
// users not in want (which the query should never return) are ignored.
func groupByUser(raw []rawEntry, want map[string]struct{}) (byUser map[string][]Entry, bad []malformed) {
	byUser = make(map[string][]Entry, len(want))
	for _, r := range raw {
		e, m := parseEntry(r)
		if m != nil {
			bad = append(bad, *m)
			continue
		}
		if _, ok := want[e.Username]; !ok {
			continue
		}
		byUser[e.Username] = append(byUser[e.Username], e)
	}
	return byUser, bad
}
