package scoring

import (
	"math"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestNumber(t *testing.T) {
	t.Parallel()
	dec := func(s string) bson.Decimal128 {
		d, err := bson.ParseDecimal128(s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	tests := map[string]struct {
		v      any
		want   float64
		wantOK bool
	}{
		"int32":               {v: int32(-3), want: -3, wantOK: true},
		"int64":               {v: int64(1) << 40, want: 1 << 40, wantOK: true},
		"double":              {v: 2.5, want: 2.5, wantOK: true},
		"decimal128":          {v: dec("12.25"), want: 12.25, wantOK: true},
		"decimal128 exponent": {v: dec("15E+2"), want: 1500, wantOK: true},
		"decimal128 too big":  {v: dec("1E+400"), want: math.Inf(1), wantOK: true},
		"string":              {v: "7"},
		"null":                {v: nil},
		"bool":                {v: true},
		"array":               {v: bson.A{int32(1)}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw, err := bson.Marshal(bson.D{{Key: "v", Value: tc.v}})
			if err != nil {
				t.Fatal(err)
			}
			got, ok := number(bson.Raw(raw).Lookup("v"))
			if ok != tc.wantOK || got != tc.want {
				t.Errorf("number(%v) = %v, %v; want %v, %v", tc.v, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
