package replay

import (
	"fmt"
	"slices"

	"github.com/scorerefresh/scorerefresh/internal/backlog"
)

// Shape is the distribution of users over a generated backlog (the one
// generator, internal/backlog, draws them).
type Shape = backlog.Shape

// The shapes of `backlog generate --shape`.
const (
	// ShapeFirehose: nine entries in ten belong to one user (a bulk import,
	// a bot), the rest to users at random: coalescing does all the work.
	ShapeFirehose = backlog.Firehose
	// ShapeDiverse: every entry's user is drawn uniformly: the window holds
	// as many distinct users as it can, the metastable wedge's trigger.
	ShapeDiverse = backlog.Diverse
	// ShapeZipf: users drawn from a Zipf law (s=1.1), as real activity
	// is: a few hot users and a long tail.
	ShapeZipf = backlog.Zipf
	// ShapeMixed: 40% one firehose user, 30% Zipf, 30% uniform: the
	// firehose and a diverse tail at once.
	ShapeMixed = backlog.Mixed
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
