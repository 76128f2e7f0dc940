package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// PromQL words that are never metric names. Keywords are case-insensitive in
// PromQL; metric names are not.
var (
	promqlAggregators = wordSet("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
		"count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio")
	promqlGrouping = wordSet("by", "without", "on", "ignoring", "group_left", "group_right")
	promqlKeywords = wordSet("and", "or", "unless", "bool", "offset", "atan2", "inf", "nan")
)

func wordSet(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// promqlMetricNames returns the metric names a PromQL expression selects,
// sorted and without duplicates. It is a tokenizer, not a parser: it skips
// strings, label matchers {...}, ranges and subqueries [...], grouping label
// lists (by, without, on, ignoring, group_left, group_right), numbers and
// durations, comments and Grafana variables ($var, ${var}), and drops
// functions (a word followed by "("), aggregators and keywords. What is left
// are selectors' metric names. Selecting by {__name__=...} is refused rather
// than silently missed. Syntax errors are promtool's business; this only
// reports what stops it from tokenizing.
func promqlMetricNames(expr string) ([]string, error) {
	var names []string
	s := expr
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(s, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '{':
			end, err := skipBlock(s, i, '{', '}')
			if err != nil {
				return nil, err
			}
			if strings.Contains(s[i:end], "__name__") {
				return nil, fmt.Errorf("selector %s at offset %d matches __name__; name the metric instead", s[i:end], i)
			}
			i = end
		case c == '[':
			end, err := skipBlock(s, i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = end
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '$': // Grafana variable: $name, ${name}, ${name:format}
			i++
			if i < len(s) && s[i] == '{' {
				end, err := skipBlock(s, i, '{', '}')
				if err != nil {
					return nil, err
				}
				i = end
			} else {
				for i < len(s) && isIdentByte(s[i], false) {
					i++
				}
			}
		case isDigit(c) || (c == '.' && i+1 < len(s) && isDigit(s[i+1])):
			i = skipNumber(s, i)
		case isIdentByte(c, true):
			start := i
			for i < len(s) && isIdentByte(s[i], false) {
				i++
			}
			word, lower := s[start:i], strings.ToLower(s[start:i])
			next := i
			for next < len(s) && isSpace(s[next]) {
				next++
			}
			followedByParen := next < len(s) && s[next] == '('
			switch {
			case promqlGrouping[lower]:
				if followedByParen {
					end, err := skipBlock(s, next, '(', ')')
					if err != nil {
						return nil, err
					}
					i = end
				}
			case promqlAggregators[lower], promqlKeywords[lower], followedByParen:
				// Not a selector.
			default:
				names = append(names, word)
			}
		default:
			i++
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// skipString returns the offset just past the string literal starting at i.
func skipString(s string, i int) (int, error) {
	quote := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && quote != '`':
			j++ // the escaped byte
		case s[j] == quote:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string starting at offset %d", i)
}

// skipBlock returns the offset just past the bracket matching the one at i,
// skipping string literals inside.
func skipBlock(s string, i int, open, close byte) (int, error) {
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '"', '\'', '`':
			end, err := skipString(s, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case open:
			depth++
		case close:
			depth--
			if depth == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("unbalanced %q starting at offset %d", open, i)
}

// skipNumber returns the offset past a number or duration literal
// (42, 0.5, 1e-3, 0x1f, 5m, 1h30m).
func skipNumber(s string, i int) int {
	start := i
	for i < len(s) {
		c := s[i]
		if (c == 'e' || c == 'E') && i+1 < len(s) && (s[i+1] == '+' || s[i+1] == '-') &&
			strings.Trim(s[start:i], "0123456789.") == "" {
			i += 2
			continue
		}
		if !isIdentByte(c, false) && c != '.' {
			break
		}
		i++
	}
	return i
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isIdentByte(c byte, first bool) bool {
	return c == '_' || c == ':' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || (!first && isDigit(c))
}

func TestPromqlMetricNames(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		expr string
		want []string
	}{
		"bare selector": {
			expr: "up",
			want: []string{"up"},
		},
		"histogram quantile with matchers and grouping": {
			expr: `histogram_quantile(0.95, sum by (namespace, le) (rate(scorerefresh_refresh_duration_seconds_bucket{job=~".*scorerefresh.*", le!="1"}[5m])))`,
			want: []string{"scorerefresh_refresh_duration_seconds_bucket"},
		},
		"binary operators and vector matching": {
			expr: "a / on (pod) group_left (version) b and c or d unless ignoring(x) e * on(y) group_right f",
			want: []string{"a", "b", "c", "d", "e", "f"},
		},
		"group_left without a label list": {
			expr: "a * on (pod) group_left b",
			want: []string{"a", "b"},
		},
		"grouping after the aggregated expression": {
			expr: "sum(rate(x_total[5m])) by (le, job) / count without (instance) (y)",
			want: []string{"x_total", "y"},
		},
		"strings never name metrics": {
			expr: `label_replace(foo{re=~"a{2}|b\"c"}, "dst", "bar_total", "src", '(.*)') + count_values("version", build_info)`,
			want: []string{"build_info", "foo"},
		},
		"offsets, modifiers, subqueries and numbers": {
			expr: "deriv((max by (j) (q))[15m:1m]) > 1e-3 and q offset -5m @ start() > bool 0x1f + 1.5e+2 - .5 + Inf",
			want: []string{"q"},
		},
		"grafana variables": {
			expr: `rate(x{ns="$namespace"}[$__rate_interval]) * $factor + ${other:raw} + y[$__range]`,
			want: []string{"x", "y"},
		},
		"keywords are case-insensitive": {
			expr: "SUM BY (job) (a) AND ON (job) b Or c",
			want: []string{"a", "b", "c"},
		},
		"comments": {
			expr: "a # b is not here\n+ c",
			want: []string{"a", "c"},
		},
		"functions with spaces before the parenthesis": {
			expr: "time () - max (last_sample) > 120",
			want: []string{"last_sample"},
		},
		"recording-rule names and duplicates": {
			expr: "job:x:rate5m + job:x:rate5m",
			want: []string{"job:x:rate5m"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := promqlMetricNames(tt.expr)
			if err != nil {
				t.Fatalf("promqlMetricNames(%q): %v", tt.expr, err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("promqlMetricNames(%q) = %q, want %q", tt.expr, got, tt.want)
			}
		})
	}
}

func TestPromqlMetricNamesRefuses(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"selection by __name__": `{__name__="scorerefresh_queue_depth"}`,
		"unbalanced matcher":    `foo{a="b"`,
		"unbalanced range":      `rate(foo[5m)`,
		"unterminated string":   `foo{a="b}`,
	}
	for name, expr := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got, err := promqlMetricNames(expr); err == nil {
				t.Errorf("promqlMetricNames(%q) = %q, want an error", expr, got)
			}
		})
	}
}
