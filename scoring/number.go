package scoring

import (
	"errors"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// number converts the BSON numeric types (int32, int64, double, decimal128)
// to float64; ok is false for anything else.
func number(v bson.RawValue) (n float64, ok bool) {
	switch v.Type {
	case bson.TypeInt32:
		return float64(v.Int32()), true
	case bson.TypeInt64:
		return float64(v.Int64()), true
	case bson.TypeDouble:
		return v.Double(), true
	case bson.TypeDecimal128:
		// String gives e.g. "2.5", "1.5E+3", "NaN" or "-Infinity", all of which
		// ParseFloat reads; beyond float64's range it saturates to ±Inf.
		f, err := strconv.ParseFloat(v.Decimal128().String(), 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return 0, false
		}
		return f, true
	}
	return 0, false
}
