// Package redact hides secrets in connection strings and in any text that
// may quote one. It knows no URI scheme or driver, so it works on strings no
// parser accepts (no scheme, a broken one, several hosts, unescaped or
// percent-encoded separators). Three rules:
//
//  1. User-info: in a word holding an '@' (or %40), everything from the start
//     of the authority up to the last '@' is replaced by REDACTED. The
//     authority starts after the first "//" (or %2F%2F), else after a leading
//     "scheme:/", else after a leading "NAME=", else at the start of the
//     word. The username goes too: nothing tells it from a password.
//  2. Secret-named values: a value introduced by NAME= or NAME: (the latter
//     only at the start of an option or of a comma-separated element, as in
//     authMechanismProperties=AWS_SESSION_TOKEN:x) is replaced when NAME
//     contains pass, pwd, secret, token, key, cred, signature or private.
//  3. Known secrets: what rules 1 and 2 find in the connection strings handed
//     to String or Error is hidden wherever it appears, raw or
//     percent-decoded, as in a driver message quoting a bare option value.
//
// Redaction errs towards hiding too much (an e-mail address loses its local
// part); applying it twice changes nothing more.
package redact

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Mask replaces whatever is hidden.
const Mask = "REDACTED"

// secretName matches the option names of rule 2, lower-cased; elementStart,
// what may precede a NAME:value pair (the start of an option or list element).
var (
	secretName   = regexp.MustCompile("pass|pwd|secret|token|key|cred|signature|private")
	elementStart = regexp.MustCompile(`(^|[=,?&;]|%3d|%2c)$`)
)

// URI returns the connection string s with its user-info and secret-named
// option values hidden. The whole of s is one value: spaces do not end it.
func URI(s string) string { return redactWord(s, func(string) {}) }

// String returns text with rules 1 and 2 applied to each word (words end at
// whitespace and quotes), and every secret of sources (connection strings) hidden anywhere.
func String(text string, sources ...string) string {
	return hideKnown(word.ReplaceAllStringFunc(text, URI), secretsOf(sources...))
}

var word = regexp.MustCompile("[^ \t\n\r\v\f\"'`]+")

// Error returns err (nil for nil) with its message redacted as String
// redacts text; errors.Is and errors.As still reach the original.
func Error(err error, sources ...string) error {
	if err == nil {
		return nil
	}
	return &redactedError{msg: String(err.Error(), sources...), err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// secretsOf returns what rules 1 and 2 hide in the connection strings (the user-info, the
// password alone, each secret value), raw and percent-decoded, longest first.
func secretsOf(sources ...string) []string {
	seen := map[string]bool{}
	add := func(s string) {
		if s == "" || s == Mask {
			return
		}
		seen[s] = true
		if d, err := url.PathUnescape(s); err == nil {
			seen[d] = true
		}
	}
	for _, src := range sources {
		redactWord(src, func(hidden string) {
			add(hidden)
			if _, pw, ok := strings.Cut(hidden, ":"); ok {
				add(pw)
			}
		})
	}
	out := slices.Collect(maps.Keys(seen))
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	return out
}

// redactWord applies rules 1 and 2 to one word; found sees every hidden piece.
func redactWord(w string, found func(string)) string {
	return hideSecretValues(hideUserInfo(w, found), found)
}

// hideUserInfo applies rule 1.
func hideUserInfo(w string, found func(string)) string {
	lw := asciiLower(w)
	at := strings.LastIndex(lw, "@")
	if at < 0 {
		at = strings.LastIndex(lw, "%40")
	}
	if at < 0 {
		return w
	}
	start := authorityStart(lw[:at])
	if start >= at || w[start:at] == Mask {
		return w
	}
	found(w[start:at])
	return w[:start] + Mask + w[at:]
}

// authorityStart is where the user-info begins in head (the lower-cased word before its last '@').
func authorityStart(head string) int {
	for _, sep := range []string{"//", "%2f%2f"} {
		if i := strings.Index(head, sep); i >= 0 {
			return i + len(sep)
		}
	}
	// Skip what may precede a URI in a word: brackets and NAME= prefixes
	// (a variable, an option), then a "scheme:/" with its slashes.
	off := 0
	for {
		rest := head[off:]
		if t := strings.TrimLeft(rest, "([{<"); len(t) < len(rest) {
			off += len(rest) - len(t)
			continue
		}
		if i := strings.IndexByte(rest, '='); i > 0 && nameLen(rest[:i]) == i {
			off += i + 1
			continue
		}
		break
	}
	if n := len(scheme.FindString(head[off:])); n > 0 && strings.HasPrefix(head[off+n:], "/") {
		off += n
		off += len(head[off:]) - len(strings.TrimLeft(head[off:], "/"))
	}
	return off
}

// scheme is a leading "scheme:" (RFC 3986), lower-cased.
var scheme = regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`)

// hideSecretValues applies rule 2: a value after '=' runs to the end of its option (the next
// '&' or ';'), one after ':' to the end of its comma-separated element.
func hideSecretValues(w string, found func(string)) string {
	lw := asciiLower(w)
	var b strings.Builder
	done := 0 // w[:done] is in b
	for i := 0; i < len(w); i++ {
		sepLen, colon := separatorAt(lw, i)
		if sepLen == 0 {
			continue
		}
		n := nameLen(lw[:i])
		if n == 0 || !secretName.MatchString(lw[i-n:i]) || (colon && !elementStart.MatchString(lw[:i-n])) {
			continue
		}
		from := i + sepLen
		to := valueEnd(lw, from, colon)
		if to == from || w[from:to] == Mask {
			continue
		}
		found(w[from:to])
		b.WriteString(w[done:from] + Mask)
		done, i = to, to-1
	}
	return b.String() + w[done:]
}

// separatorAt reports a name/value separator at lw[i], plain or encoded.
func separatorAt(lw string, i int) (n int, colon bool) {
	for _, sep := range []string{"=", ":", "%3d", "%3a"} {
		if strings.HasPrefix(lw[i:], sep) {
			return len(sep), sep == ":" || sep == "%3a"
		}
	}
	return 0, false
}

func valueEnd(lw string, from int, colon bool) int {
	ends := []string{"&", ";"}
	if colon {
		ends = append(ends, ",", "%2c")
	}
	to := len(lw)
	for _, e := range ends {
		if i := strings.Index(lw[from:], e); i >= 0 {
			to = min(to, from+i)
		}
	}
	return to
}

// nameLen is the length of the option name that ends s.
func nameLen(s string) int {
	i := len(s)
	for i > 0 && (isWordByte(s[i-1]) || s[i-1] == '-' || s[i-1] == '.') {
		i--
	}
	return len(s) - i
}

// hideKnown replaces each secret in text, those under four bytes only as whole words: hiding
// "pw" inside "pwned" would garble a message without protecting anything.
func hideKnown(text string, secrets []string) string {
	for _, s := range secrets {
		if len(s) >= 4 {
			text = strings.ReplaceAll(text, s, Mask)
		} else {
			text = replaceWord(text, s)
		}
	}
	return text
}

func replaceWord(text, word string) string {
	var b strings.Builder
	done := 0
	for i := 0; ; i++ {
		j := strings.Index(text[i:], word)
		if j < 0 {
			return b.String() + text[done:]
		}
		i += j
		end := i + len(word)
		if (i == 0 || !isWordByte(text[i-1])) && (end == len(text) || !isWordByte(text[end])) {
			b.WriteString(text[done:i] + Mask)
			done, i = end, end-1
		}
	}
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// asciiLower lower-cases ASCII letters only, so indexes into the result are indexes into s.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Handler wraps h so that every error logged through it is redacted as String redacts text,
// the secrets of sources too: errors are where a connection string turns up unannounced.
// Other values are left alone: one known to hold a URI is redacted where it is logged.
func Handler(h slog.Handler, sources ...string) slog.Handler {
	return &handler{Handler: h, sources: sources}
}

type handler struct {
	slog.Handler // the next one; Enabled is its
	sources      []string
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &handler{Handler: h.Handler.WithAttrs(h.attrs(attrs)), sources: h.sources}
}

func (h *handler) attrs(as []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = h.attr(a)
	}
	return out
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{Handler: h.Handler.WithGroup(name), sources: h.sources}
}

func (h *handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindGroup:
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(h.attrs(v.Group())...)}
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.Any(a.Key, Error(err, h.sources...))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
