package deploy

// The parsers of assetparse_*_test.go read the deployment assets without
// Docker or Kubernetes at hand: Dockerfiles, shell command lines,
// .dockerignore patterns, image references, Kubernetes quantities and
// GOMEMLIMIT. Each covers what this repository's assets use and refuses the
// rest (heredocs, for one) rather than guess.

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Stage is one FROM of a Dockerfile and the instructions that follow it.
type Stage struct {
	From     string // image or earlier stage
	Name     string // AS name
	Platform string
	Lines    []Instruction
}

// Instruction is one instruction, its continuation lines joined.
type Instruction struct {
	Cmd  string // upper case: RUN, COPY, USER, ...
	Args string
	Line int
}

// ParseDockerfile splits a Dockerfile into stages of instructions, joining
// continuation lines and dropping comments. Heredocs are not supported.
func ParseDockerfile(src string) ([]Stage, error) {
	ins, err := instructions(src)
	if err != nil {
		return nil, err
	}
	var stages []Stage
	for _, in := range ins {
		if in.Cmd == "FROM" {
			st, err := fromStage(in)
			if err != nil {
				return nil, err
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			if in.Cmd == "ARG" {
				continue // global ARG before the first FROM
			}
			return nil, fmt.Errorf("line %d: %s before FROM", in.Line, in.Cmd)
		}
		if strings.Contains(in.Args, "<<") && (in.Cmd == "RUN" || in.Cmd == "COPY") {
			return nil, fmt.Errorf("line %d: heredocs are not supported by this test's parser", in.Line)
		}
		stages[len(stages)-1].Lines = append(stages[len(stages)-1].Lines, in)
	}
	return stages, nil
}

// instructions reads src's logical lines: continuations joined, comments
// (also between continuation lines) and blank lines dropped, each with the
// number of the line it starts on.
func instructions(src string) ([]Instruction, error) {
	var out []Instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if cur.Len() == 0 {
			if trimmed == "" {
				continue
			}
			start = i + 1
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		if text := strings.TrimSpace(cur.String()); text != "" {
			cmd, args, _ := strings.Cut(text, " ")
			out = append(out, Instruction{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args), Line: start})
		}
		cur.Reset()
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("line %d: continuation at the end of the file", start)
	}
	return out, nil
}

// fromStage reads a FROM instruction: [--platform=P] image [AS name].
func fromStage(in Instruction) (Stage, error) {
	st := Stage{}
	fields := strings.Fields(in.Args)
	for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
		if p, ok := strings.CutPrefix(fields[0], "--platform="); ok {
			st.Platform = p
		}
		fields = fields[1:]
	}
	switch {
	case len(fields) == 1:
	case len(fields) == 3 && strings.EqualFold(fields[1], "AS"):
		st.Name = fields[2]
	default:
		return Stage{}, fmt.Errorf("line %d: cannot read FROM %s", in.Line, in.Args)
	}
	st.From = fields[0]
	return st, nil
}

// ExecForm parses a JSON-array ENTRYPOINT or CMD.
func ExecForm(in Instruction) ([]string, error) {
	var argv []string
	if err := json.Unmarshal([]byte(in.Args), &argv); err != nil {
		return nil, fmt.Errorf("line %d: %s %s: want the exec form [\"...\"] (no shell in the image; signals reach the process)", in.Line, in.Cmd, in.Args)
	}
	return argv, nil
}
