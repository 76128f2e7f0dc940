package scoring

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// validFieldPath reports whether path can be used as a field in a query and
// as "$path" in an aggregation expression.
func validFieldPath(path string) bool {
	if strings.HasPrefix(path, "$") || strings.ContainsRune(path, 0) {
		return false
	}
	for part := range strings.SplitSeq(path, ".") {
		if part == "" {
			return false
		}
	}
	return true
}

// suggestKey returns the known component key closest to a misspelt one, or ""
// when none is close enough to be a likely typo.
func suggestKey(key string) string {
	best, bestDist := "", 3 // at most two edits away
	for _, k := range componentKeys {
		d := editDistance(strings.ToLower(key), strings.ToLower(k))
		// Short keys need a closer match: "x" is not a typo of "op".
		if d < bestDist && d < len(k)/2+1 {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		return "a scalar " + n.Value
	case yaml.AliasNode:
		return "an alias"
	default:
		return "nothing"
	}
}
