package deploy

import (
	"path"
	"regexp"
	"strings"
)

// Dockerignore is a compiled .dockerignore.
type Dockerignore []ignorePattern

type ignorePattern struct {
	re     *regexp.Regexp
	negate bool
}

// ParseDockerignore compiles .dockerignore patterns: Go's filepath.Match
// syntax plus **, matching a path or any of its parents, the last matching
// pattern deciding (! re-includes).
func ParseDockerignore(src string) Dockerignore {
	var ps []ignorePattern
	for _, line := range strings.Split(src, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p := ignorePattern{}
		if rest, ok := strings.CutPrefix(line, "!"); ok {
			p.negate, line = true, strings.TrimSpace(rest)
		}
		line = strings.Trim(path.Clean(line), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch c := line[i]; {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case c == '*':
				re.WriteString("[^/]*")
			case c == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		re.WriteString("(/.*)?$")
		p.re = regexp.MustCompile(re.String())
		ps = append(ps, p)
	}
	return ps
}

// Ignores reports whether the build context leaves out rel (slash-separated,
// relative to the context root).
func (ps Dockerignore) Ignores(rel string) bool {
	ignored := false
	for _, p := range ps {
		if p.re.MatchString(rel) {
			ignored = !p.negate
		}
	}
	return ignored
}
