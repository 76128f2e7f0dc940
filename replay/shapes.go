package replay

import (
	"fmt"
	"slices"

	"github.com/scorerefresh/scorerefresh/internal/backlog"
)

// Shape is the distribution of users over a generated backlog, drawn by
// internal/backlog, whose constants say what each one means.
type Shape = backlog.Shape

// The shapes of `backlog generate --shape`.
const (
	ShapeFirehose = backlog.Firehose
	ShapeDiverse  = backlog.Diverse
	ShapeZipf     = backlog.Zipf
	ShapeMixed    = backlog.Mixed
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
