package deploy

import (
	"slices"
	"strings"
	"testing"
)

func TestShellWords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     []string
		err      bool
	}{
		{"blanks", " a \tb\nc ", []string{"a", "b", "c"}, false},
		{"single quotes keep everything", `'a "b" $X \n'`, []string{`a "b" $X \n`}, false},
		{"double quotes unescape \" \\ $ and backtick only", `"a \"b\" \$X \n \\"`, []string{`a "b" $X \n \`}, false},
		{"quotes join a word", `-ldflags="-s -w"x`, []string{"-ldflags=-s -wx"}, false},
		{"empty quotes are a word", `a '' b`, []string{"a", "", "b"}, false},
		{"backslash escapes a blank", `a\ b c`, []string{"a b", "c"}, false},
		{"operators are words", `a&&b||c;d|e`, []string{"a", "&&", "b", "||", "c", ";", "d", "|", "e"}, false},
		{"variables stay unexpanded", `X=${V:-1} go`, []string{"X=${V:-1}", "go"}, false},
		{"unterminated single quote", `a 'b`, nil, true},
		{"unterminated double quote", `a "b`, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ShellWords(tc.in)
			if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
				t.Errorf("ShellWords(%q) = %q, %v; want %q, error %t", tc.in, got, err, tc.want, tc.err)
			}
		})
	}
}

func TestParseDockerfile(t *testing.T) {
	t.Parallel()
	src := `# syntax=docker/dockerfile:1
ARG GO=1.26
FROM --platform=$BUILDPLATFORM golang:1.26.0 AS build
RUN go build \
    # a comment between continuation lines
    -o /out ./cmd/x

from gcr.io/distroless/static:nonroot
COPY --from=build /out /x
ENTRYPOINT ["/x"]
`
	stages, err := ParseDockerfile(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 2 {
		t.Fatalf("%d stages, want 2", len(stages))
	}
	b, r := stages[0], stages[1]
	if b.From != "golang:1.26.0" || b.Name != "build" || b.Platform != "$BUILDPLATFORM" {
		t.Errorf("build stage %+v", b)
	}
	if len(b.Lines) != 1 || b.Lines[0].Cmd != "RUN" || b.Lines[0].Args != "go build  -o /out ./cmd/x" || b.Lines[0].Line != 4 {
		t.Errorf("build stage lines %+v: want the RUN of line 4, its continuation joined and the comment dropped", b.Lines)
	}
	if r.From != "gcr.io/distroless/static:nonroot" || r.Name != "" || len(r.Lines) != 2 {
		t.Errorf("runtime stage %+v (a lower-case from is still FROM)", r)
	}
	argv, err := ExecForm(r.Lines[1])
	if err != nil || !slices.Equal(argv, []string{"/x"}) {
		t.Errorf("ExecForm(%+v) = %q, %v", r.Lines[1], argv, err)
	}

	for _, tc := range []struct{ name, src, err string }{
		{"instruction before FROM", "RUN x\nFROM a:1.0.0", "RUN before FROM"},
		{"heredoc", "FROM a:1.0.0\nRUN <<EOF\nx\nEOF", "heredocs"},
		{"unreadable FROM", "FROM a b c d", "cannot read FROM"},
		{"dangling continuation", "FROM a:1.0.0\nRUN x \\", "continuation at the end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseDockerfile(tc.src); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("got %v, want an error with %q", err, tc.err)
			}
		})
	}
	if _, err := ExecForm(Instruction{Cmd: "CMD", Args: "/x run"}); err == nil {
		t.Errorf("ExecForm accepted the shell form")
	}
}

func TestDockerignore(t *testing.T) {
	t.Parallel()
	ps := ParseDockerignore(`
# comment
.git
*.md
!README.md
bench/**/results
docs/?.svg
/tmp/
`)
	for _, tc := range []struct {
		path    string
		ignored bool
	}{
		{".git", true},
		{".git/HEAD", true},     // a pattern covers what is under a match
		{"CHANGELOG.md", true},  // * matches within a name
		{"docs/x.md", false},    // but not across /
		{"README.md", false},    // ! re-includes, the last match deciding
		{"bench/results", true}, // ** matches zero directories
		{"bench/a/b/results", true},
		{"docs/a.svg", true},
		{"docs/ab.svg", false}, // ? is one character
		{"tmp/x", true},        // leading and trailing slashes are dropped
		{"go.mod", false},
	} {
		if got := ps.Ignores(tc.path); got != tc.ignored {
			t.Errorf("Ignores(%q) = %t, want %t", tc.path, got, tc.ignored)
		}
	}
}

func TestImagePinned(t *testing.T) {
	t.Parallel()
	digest := "@sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		ref    string
		pinned bool
	}{
		{"mongo:7.0.14", true},
		{"ghcr.io/org/app:v1.2.3", true},
		{"grafana/grafana:11.2.0-ubuntu", true},
		{"mongo" + digest, true},
		{"mongo:latest" + digest, true},
		{"mongo", false},
		{"mongo:latest", false},
		{"mongo:7", false},
		{"mongo:7.0", false},
		{"localhost:5000/app", false}, // the registry's port is not a tag
	} {
		if err := ImagePinned(tc.ref); (err == nil) != tc.pinned {
			t.Errorf("ImagePinned(%q) = %v, want pinned %t", tc.ref, err, tc.pinned)
		}
	}
	for ref, tag := range map[string]string{"golang:1.26.0-alpine": "1.26.0-alpine", "localhost:5000/app": "", "a:1.0.0" + digest: "1.0.0"} {
		if got := ImageTag(ref); got != tag {
			t.Errorf("ImageTag(%q) = %q, want %q", ref, got, tag)
		}
	}
	for s, want := range map[string][3]int{"1.26.0-alpine": {1, 26, 0}, "v7.0": {7, 0, 0}, "1.26rc1": {1, 26, 0}} {
		if got, ok := LeadingVersion(s); !ok || got != want {
			t.Errorf("LeadingVersion(%q) = %v, %t; want %v", s, got, ok, want)
		}
	}
	if _, ok := LeadingVersion("latest"); ok {
		t.Errorf("LeadingVersion(latest) found a version")
	}
}

// sizeCase is one input of a parser of sizes and what it must give.
type sizeCase struct {
	in   string
	want float64
	err  bool
}

func checkSizes(t *testing.T, name string, parse func(string) (float64, error), cases []sizeCase) {
	t.Helper()
	for _, tc := range cases {
		got, err := parse(tc.in)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("%s(%q) = %v, %v; want %v, error %t", name, tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestQuantity(t *testing.T) {
	t.Parallel()
	checkSizes(t, "Quantity", Quantity, []sizeCase{
		{"1", 1, false},
		{"0.5", 0.5, false},
		{"250m", 0.25, false},
		{"512Mi", 512 << 20, false},
		{"1Gi", 1 << 30, false},
		{"1G", 1e9, false},
		{"2k", 2000, false},
		{"", 0, true},
		{"1Xi", 0, true},
		{"Mi", 0, true},
	})
}

func TestGoMemLimit(t *testing.T) {
	t.Parallel()
	checkSizes(t, "GoMemLimit", GoMemLimit, []sizeCase{
		{"400MiB", 400 << 20, false},
		{"1GiB", 1 << 30, false},
		{"2048KiB", 2 << 20, false},
		{"1048576B", 1 << 20, false},
		{"1048576", 1 << 20, false}, // plain bytes from 1 MiB up
		{"1000", 0, true},           // a forgotten unit
		{"400Mi", 0, true},          // Kubernetes' spelling, not Go's
		{"1.5GiB", 0, true},         // whole numbers only
		{"-1MiB", 0, true},
	})
}
