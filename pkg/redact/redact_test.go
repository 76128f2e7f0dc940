package redact

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"testing"
)

// uriCases are connection strings, well-formed or not, each with what URI
// must make of it. secrets lists what must not survive (besides the
// defaults below); the want column pins the exact output so over-eager
// redaction shows up too.
var uriCases = []struct {
	name, in, want string
	secrets        []string
}{
	{"empty", "", "", nil},
	{"no credentials", "mongodb://localhost:27017", "mongodb://localhost:27017", nil},
	{"no credentials, options", "mongodb://db:27017/app?replicaSet=rs0&appName=x", "mongodb://db:27017/app?replicaSet=rs0&appName=x", nil},
	{"password", "mongodb://admin:pw@host:27017/app?authSource=admin", "mongodb://REDACTED@host:27017/app?authSource=admin", nil},
	{"username only", "mongodb://admin@host", "mongodb://REDACTED@host", []string{"admin"}},
	{"empty username", "mongodb://:pw@host", "mongodb://REDACTED@host", nil},
	{"empty user-info", "mongodb://@host", "mongodb://@host", nil},
	{"srv", "mongodb+srv://admin:pw@cluster0.example.net/?retryWrites=true", "mongodb+srv://REDACTED@cluster0.example.net/?retryWrites=true", nil},
	{"several hosts", "mongodb://admin:pw@h1:27017,h2:27017,h3/?replicaSet=rs0", "mongodb://REDACTED@h1:27017,h2:27017,h3/?replicaSet=rs0", nil},
	{"ipv6 host", "mongodb://admin:pw@[::1]:27017/", "mongodb://REDACTED@[::1]:27017/", nil},
	{"no scheme", "admin:pw@host:27017", "REDACTED@host:27017", nil},
	{"no scheme, no username", "pw@host", "REDACTED@host", nil},
	{"scheme without colon", "mongodb//admin:pw@host:27017", "mongodb//REDACTED@host:27017", nil},
	{"scheme with one slash", "mongodb:/admin:pw@host", "mongodb:/REDACTED@host", nil},
	{"scheme without slashes", "mongodb:admin:pw@host", "REDACTED@host", []string{"admin"}},
	{"only slashes", "//admin:pw@host", "//REDACTED@host", nil},
	{"unknown scheme", "postgres://admin:pw@host/db", "postgres://REDACTED@host/db", nil},
	{"unescaped @ in password", "mongodb://admin:p@ss@host", "mongodb://REDACTED@host", []string{"p@ss", "ss@"}},
	{"unescaped slash in password", "mongodb://admin:pa/ss@host", "mongodb://REDACTED@host", []string{"pa/ss", "pa/"}},
	{"unescaped ? and & in password", "mongodb://admin:p?a&ss=1@host/?x=y", "mongodb://REDACTED@host/?x=y", []string{"p?a", "ss=1"}},
	{"space in password", "mongodb://admin:pa ss@host", "mongodb://REDACTED@host", []string{"pa ss", "pa"}},
	{"percent-encoded password", "mongodb://ad%40min:p%40ss%3Aw@host", "mongodb://REDACTED@host", []string{"p%40ss", "ad%40min"}},
	{"bad escape in password", "mongodb://admin:p%zzss@%zz", "mongodb://REDACTED@%zz", []string{"p%zzss"}},
	{"whole URI percent-encoded", "mongodb%3A%2F%2Fadmin%3Apw%40host%2F", "mongodb%3A%2F%2FREDACTED%40host%2F", []string{"admin%3Apw"}},
	{"upper-case encoding", "mongodb%3a%2f%2fadmin%3apw%40host", "mongodb%3a%2f%2fREDACTED%40host", []string{"admin%3apw"}},
	{"leading variable name", "MONGODB_URI=admin:pw@host", "MONGODB_URI=REDACTED@host", nil},
	{"in brackets", "<admin:pw@host>", "<REDACTED@host>", nil},
	{"certificate key password", "mongodb://h/?tls=true&tlsCertificateKeyFilePassword=s3cret&appName=x", "mongodb://h/?tls=true&tlsCertificateKeyFilePassword=REDACTED&appName=x", []string{"s3cret"}},
	{"semicolon separators", "mongodb://h/?proxyPassword=s3cret;proxyUsername=bob", "mongodb://h/?proxyPassword=REDACTED;proxyUsername=bob", []string{"s3cret"}},
	{"upper-case name", "mongodb://h/?PASSWORD=s3cret", "mongodb://h/?PASSWORD=REDACTED", []string{"s3cret"}},
	{"value with = and ,", "mongodb://h/?apiKey=ab,c==&w=1", "mongodb://h/?apiKey=REDACTED&w=1", []string{"ab,c=="}},
	{"empty secret value", "mongodb://h/?tlsCertificateKeyFilePassword=&w=1", "mongodb://h/?tlsCertificateKeyFilePassword=&w=1", nil},
	{"any secret-looking name", "mongodb://h/?clientSecret=a1&accessToken=b2&myCredential=c3&privateThing=d4&sslPwd=e5&signature=f6",
		"mongodb://h/?clientSecret=REDACTED&accessToken=REDACTED&myCredential=REDACTED&privateThing=REDACTED&sslPwd=REDACTED&signature=REDACTED",
		[]string{"a1", "b2", "c3", "d4", "e5", "f6"}},
	{"mechanism properties", "mongodb://h/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:tok123,SERVICE_NAME:mongodb",
		"mongodb://h/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:REDACTED,SERVICE_NAME:mongodb", []string{"tok123"}},
	{"mechanism properties, token last", "mongodb://h/?authMechanismProperties=SERVICE_NAME:x,AWS_SESSION_TOKEN:tok123",
		"mongodb://h/?authMechanismProperties=SERVICE_NAME:x,AWS_SESSION_TOKEN:REDACTED", []string{"tok123"}},
	{"mechanism properties, encoded", "mongodb://h/?authMechanismProperties=AWS_SESSION_TOKEN%3Atok123%2CSERVICE_NAME%3Ax",
		"mongodb://h/?authMechanismProperties=AWS_SESSION_TOKEN%3AREDACTED%2CSERVICE_NAME%3Ax", []string{"tok123"}},
	{"encoded =", "mongodb://h/?password%3Ds3cret", "mongodb://h/?password%3DREDACTED", []string{"s3cret"}},
	{"credentials and options", "mongodb://admin:pw@h1,h2/?replicaSet=rs&tlsCertificateKeyFilePassword=s3cret",
		"mongodb://REDACTED@h1,h2/?replicaSet=rs&tlsCertificateKeyFilePassword=REDACTED", []string{"s3cret"}},
	{"host named like a secret", "mongodb://keyserver:27017/", "mongodb://keyserver:27017/", nil},
	{"not a URI", "hello world", "hello world", nil},
}

func TestURI(t *testing.T) {
	t.Parallel()
	for _, tc := range uriCases {
		got := URI(tc.in)
		if got != tc.want {
			t.Errorf("%s: URI(%q)\n got %q\nwant %q", tc.name, tc.in, got, tc.want)
		}
		for _, s := range append([]string{"admin:", ":pw", "s3cret"}, tc.secrets...) {
			if strings.Contains(got, s) {
				t.Errorf("%s: URI(%q) = %q still holds %q", tc.name, tc.in, got, s)
			}
		}
		if again := URI(got); again != got {
			t.Errorf("%s: not idempotent: %q then %q", tc.name, got, again)
		}
	}
}

// TestStringFindsURIsInText embeds every case in a message, the way a driver
// error or a log line quotes a connection string.
func TestStringFindsURIsInText(t *testing.T) {
	t.Parallel()
	for _, tc := range uriCases {
		if strings.ContainsAny(tc.in, " ") {
			continue // free text ends a URI at a space; URI handles those
		}
		for _, frame := range []string{"connecting to %s failed", "error parsing uri %q", "uri=%s\tnext", "(%s)", "%s"} {
			msg := fmt.Sprintf(frame, tc.in)
			got := String(msg)
			// A secret value runs to the end of its word: the ")" goes
			// with it (it might be the password's last character).
			if want := fmt.Sprintf(frame, tc.want); got != want && got+")" != want {
				t.Errorf("%s: String(%q)\n got %q\nwant %q", tc.name, msg, got, want)
			}
			for _, s := range append([]string{"admin:", ":pw", "s3cret"}, tc.secrets...) {
				if strings.Contains(got, s) {
					t.Errorf("%s: String(%q) = %q still holds %q", tc.name, msg, got, s)
				}
			}
		}
	}
}

func TestStringText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"two: mongodb://a:pw1@h1 and mongodb://b:pw2@h2/?password=x", "two: mongodb://REDACTED@h1 and mongodb://REDACTED@h2/?password=REDACTED"},
		{"server selection error: context deadline exceeded, current topology: { Type: Single, Servers: [{ Addr: db:27017 }] }",
			"server selection error: context deadline exceeded, current topology: { Type: Single, Servers: [{ Addr: db:27017 }] }"},
		{"E11000 duplicate key error collection: app.user_scores index: _id_ dup key: { _id: \"ann\" }",
			"E11000 duplicate key error collection: app.user_scores index: _id_ dup key: { _id: \"ann\" }"},
		{"token=abc key=def user=bob", "token=REDACTED key=REDACTED user=bob"},
		{"password:hunter2", "password:REDACTED"},
		{"mail ann@example.com", "mail REDACTED@example.com"}, // errs towards hiding
		{"line one\nMONGODB_URI=mongodb://u:pw@h\n", "line one\nMONGODB_URI=mongodb://REDACTED@h\n"},
	} {
		if got := String(tc.in); got != tc.want {
			t.Errorf("String(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

func TestStringHidesSecretsOfItsSources(t *testing.T) {
	t.Parallel()
	src := "mongodb://admin:l0ng%2Fpw@h/?tlsCertificateKeyFilePassword=k3yp4ss&authMechanismProperties=AWS_SESSION_TOKEN:tok3n&appName=pw"
	for _, tc := range []struct{ in, want string }{
		// The driver quotes a bad option value without its name.
		{`error parsing uri: invalid option value "k3yp4ss": invalid URL escape`, `error parsing uri: invalid option value "REDACTED": invalid URL escape`},
		{`auth failed for l0ng/pw`, `auth failed for REDACTED`},   // decoded
		{`auth failed for l0ng%2Fpw`, `auth failed for REDACTED`}, // raw
		{`session tok3n expired`, `session REDACTED expired`},
		{`appName pw kept in "pwned"`, `appName pw kept in "pwned"`}, // pw is not a secret of the source
	} {
		if got := String(tc.in, src); got != tc.want {
			t.Errorf("String(%q, src)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
	short := "admin:pw@host"
	if got := String(`bad password "pw" in pwned`, short); got != `bad password "REDACTED" in pwned` {
		t.Errorf("short secret: %q (want it hidden as a word, kept inside words)", got)
	}
}

func TestErrorKeepsTheChain(t *testing.T) {
	t.Parallel()
	base := fmt.Errorf("connecting to mongodb://admin:pw@h: %w", fs.ErrNotExist)
	err := Error(fmt.Errorf("starting: %w", base), "mongodb://admin:pw@h")
	if strings.Contains(err.Error(), "pw") || !strings.Contains(err.Error(), "mongodb://REDACTED@h") {
		t.Errorf("message %q", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Error("errors.Is lost the cause")
	}
	if Error(nil) != nil {
		t.Error("Error(nil) != nil")
	}
}

func FuzzStringIsIdempotentAndHidesPasswords(f *testing.F) {
	for _, tc := range uriCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		once := String(s)
		if twice := String(once); twice != once {
			t.Errorf("String not idempotent on %q: %q then %q", s, once, twice)
		}
		uri := "mongodb://u:" + strings.NewReplacer("@", "", " ", "", "\"", "", "'", "", "`", "", "\t", "", "\n", "").Replace(s) + "XSECRETX@h/"
		if strings.Contains(String(uri), "XSECRETX") || strings.Contains(URI(uri), "XSECRETX") {
			t.Errorf("password survived in %q: %q", uri, String(uri))
		}
	})
}

func TestHandlerRedactsLoggedErrors(t *testing.T) {
	t.Parallel()
	var sb strings.Builder
	uri := "mongodb://admin:hunter2@h/?tlsCertificateKeyFilePassword=hun%zzter3"
	log := slog.New(Handler(slog.NewJSONHandler(&sb, nil), uri)).With("boot", errors.New("parsing mongodb://x:hunter2@h"))
	log.WithGroup("g").Error("cannot start",
		"err", errors.New(`invalid option value "hun%zzter3"`),
		"nested", slog.GroupValue(slog.Any("cause", fmt.Errorf("dial mongodb://admin:hunter2@h: refused"))),
		"user", "ann@example.com") // not an error: left alone
	out := sb.String()
	for _, secret := range []string{"hunter2", "hun%zzter3"} {
		if strings.Contains(out, secret) {
			t.Errorf("%q logged: %s", secret, out)
		}
	}
	if !strings.Contains(out, "ann@example.com") || strings.Count(out, Mask) != 3 {
		t.Errorf("log line %s", out)
	}
}
