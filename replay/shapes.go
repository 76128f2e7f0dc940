package replay

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Shape is the distribution of users over a generated backlog.
type Shape string

// The shapes of `backlog generate --shape`.
const (
	// ShapeFirehose: nine entries in ten belong to one user (a bulk import,
	// a bot), the rest to users at random: coalescing does all the work.
	ShapeFirehose Shape = "firehose"
	// ShapeDiverse: every entry's user is drawn uniformly: the window holds
	// as many distinct users as it can, the metastable wedge's trigger.
	ShapeDiverse Shape = "diverse"
	// ShapeZipf: users drawn from a Zipf law (s=1.1), as real activity
	// is: a few hot users and a long tail.
	ShapeZipf Shape = "zipf"
	// ShapeMixed: 40% one firehose user, 30% Zipf, 30% uniform: the
	// firehose and a diverse tail at once.
	ShapeMixed Shape = "mixed"
)

// Shapes lists every shape, for usage text and validation.
var Shapes = []Shape{ShapeFirehose, ShapeDiverse, ShapeZipf, ShapeMixed}

// ParseShape validates a --shape value.
func ParseShape(s string) (Shape, error) {
	if slices.Contains(Shapes, Shape(s)) {
		return Shape(s), nil
	}
	return "", fmt.Errorf("unknown shape %q: want one of %v", s, Shapes)
}

// userName is the username of user i; user 0 is the firehose.
func userName(i int) string { return fmt.Sprintf("user-%05d", i) }

// picker returns a function that draws the index of the next entry's user
// in [0, users).
func (s Shape) picker(rnd *rand.Rand, users int) func() int {
	uniform := func() int { return rnd.IntN(users) }
	zipf := uniform
	if users > 1 {
		z := rand.NewZipf(rnd, 1.1, 1, uint64(users-1))
		zipf = func() int { return int(z.Uint64()) }
	}
	switch s {
	case ShapeFirehose:
		return func() int {
			if rnd.Float64() < 0.9 {
				return 0
			}
			return uniform()
		}
	case ShapeZipf:
		return zipf
	case ShapeMixed:
		return func() int {
			switch f := rnd.Float64(); {
			case f < 0.4:
				return 0
			case f < 0.7:
				return zipf()
			default:
				return uniform()
			}
		}
	}
	return uniform
}
