package planner

// skipList finds the next index at or after i still in a set that only ever
// loses members, in amortised near-constant time (union-find with path
// halving): the simulation walks the queue's head past absorbed and
// acknowledged entries without visiting them again.
type skipList struct{ next []int32 }

func newSkipList(n int) skipList {
	s := skipList{next: make([]int32, n+1)} // n is the sentinel "past the end"
	for i := range s.next {
		s.next[i] = int32(i)
	}
	return s
}

// find returns the first member at or after i, or n when none is left.
func (s skipList) find(i int) int {
	for int(s.next[i]) != i {
		s.next[i] = s.next[s.next[i]]
		i = int(s.next[i])
	}
	return i
}

// remove takes i out of the set.
func (s skipList) remove(i int) { s.next[i] = int32(i + 1) }
