package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args     []string
		operands bool
		code     int
		ok       bool
		stdout   string // a part of it
		stderr   string // a part of it
		rest     []string
	}{
		{args: nil, ok: true},
		{args: []string{"--n", "3"}, ok: true},
		{args: []string{"--n", "3", "-h"}, code: 0, stdout: "usage: x"},
		{args: []string{"a", "--help"}, operands: true, code: 0, stdout: "usage: x"},
		{args: []string{"--", "-h"}, operands: true, ok: true, rest: []string{"-h"}},
		{args: []string{"-help=true"}, code: 0, stdout: "usage: x"},
		{args: []string{"--nope"}, code: 2, stderr: "-nope"},
		{args: []string{"a"}, code: 2, stderr: `x: unexpected argument "a"`},
		{args: []string{"a", "-"}, operands: true, ok: true, rest: []string{"a", "-"}},
		{args: []string{"a", "--n", "3"}, operands: true, code: 2, stderr: `"--n" after the operands`},
		{args: []string{"--n", "3", "--", "a", "-b"}, operands: true, ok: true, rest: []string{"a", "-b"}},
	} {
		var stdout, stderr bytes.Buffer
		fs := NewFlagSet("x", "usage: x\n", &stderr)
		fs.Int("n", 0, "a number")
		code, ok := Parse(fs, tc.args, tc.operands, &stdout)
		if code != tc.code || ok != tc.ok || !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) ||
			(!tc.ok && tc.code == 2 && !strings.Contains(stderr.String(), "usage: x")) || (tc.ok && strings.Join(fs.Args(), " ") != strings.Join(tc.rest, " ")) {
			t.Errorf("%q: code %d ok %t rest %q\nstdout %q\nstderr %q", tc.args, code, ok, fs.Args(), stdout.String(), stderr.String())
		}
		if tc.code == 0 && !tc.ok && stderr.Len() > 0 {
			t.Errorf("%q: help wrote on stderr: %q", tc.args, stderr.String())
		}
	}
}
