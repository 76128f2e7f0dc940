// Package numfmt formats numbers for people reading a terminal or a report.
package numfmt

import (
	"strconv"
	"strings"
)

// Thousands formats n with comma separators: 20,000 reads faster than 20000.
func Thousands[N ~int | ~int64](n N) string {
	s := strconv.FormatInt(int64(n), 10)
	digits, sign := strings.CutPrefix(s, "-")
	for i := len(digits) - 3; i > 0; i -= 3 {
		digits = digits[:i] + "," + digits[i:]
	}
	if sign {
		return "-" + digits
	}
	return digits
}
