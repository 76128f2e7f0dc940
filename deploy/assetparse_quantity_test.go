package deploy

import (
	"fmt"
	"strconv"
	"strings"
)

// Quantity reads a Kubernetes quantity (100m, 1, 512Mi, 1G).
func Quantity(s string) (float64, error) {
	suffixes := []struct {
		s string
		m float64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"m", 1e-3}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}
	for _, suf := range suffixes {
		if n, ok := strings.CutSuffix(s, suf.s); ok {
			v, err := strconv.ParseFloat(n, 64)
			return v * suf.m, err
		}
	}
	return strconv.ParseFloat(s, 64)
}

// GoMemLimit reads GOMEMLIMIT's syntax: bytes with an optional B, KiB,
// MiB, GiB or TiB suffix.
func GoMemLimit(s string) (float64, error) {
	for _, suf := range []struct {
		s string
		m float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if n, ok := strings.CutSuffix(s, suf.s); ok {
			v, err := strconv.ParseUint(n, 10, 64)
			return float64(v) * suf.m, err
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err == nil && v < 1<<20 {
		return 0, fmt.Errorf("%d bytes: a unit is missing (GOMEMLIMIT takes B, KiB, MiB, GiB)", v)
	}
	return float64(v), err
}
