// Package config reads the service's environment (docs/contract.md) once, in
// cmd/, and hands plain values down: packages below cmd/ never read it.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/redact"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// Config is every variable of the contract (docs/contract.md); an unset or empty one keeps its
// Defaults() value. Each help tag is the field's line in `scorerefresh run --help` (Variables).
type Config struct {
	MongoURI             string        `env:"MONGODB_URI" help:"connection string, mongodb:// or mongodb+srv://; its secrets are never logged or printed"`
	Database             string        `env:"MONGODB_DATABASE" help:"database of every collection below; not empty"`
	QueueCollection      string        `env:"QUEUE_COLLECTION" help:"the queue; not empty, no other collection's name"`
	ScoresCollection     string        `env:"SCORES_COLLECTION" help:"score documents; not empty, no other collection's name"`
	DeadLetterCollection string        `env:"DEADLETTER_COLLECTION" help:"dead letters; not empty, no other collection's name"`
	ClaimsCollection     string        `env:"CLAIMS_COLLECTION" help:"leases and limiter baselines; not empty, no other collection's name"`
	ScoringRules         string        `env:"SCORING_RULES" help:"rules file path; empty: the built-in rules"`
	ScorerURL            string        `env:"SCORER_URL" help:"an external scorer (http:// or https://) asked for the scores instead of rules; not with SCORING_RULES"`
	ScorerToken          string        `env:"SCORER_TOKEN" help:"bearer token sent to the external scorer; a secret, never logged or printed"`
	ScorerTimeout        time.Duration `env:"SCORER_TIMEOUT" help:"deadline of one request to the external scorer; > 0"`
	ClaimWindow          int           `env:"CLAIM_WINDOW" help:"oldest entries one claim round reads; 1 to 10000"`
	MaxUsersInFlight     int           `env:"MAX_USERS_IN_FLIGHT" help:"users claimed and unsettled at once; ≥ 1"`
	RefreshConcurrency   int           `env:"REFRESH_CONCURRENCY" help:"refresh slots (the upper bound when adaptive); 1 to MAX_USERS_IN_FLIGHT"`
	AdaptiveConcurrency  bool          `env:"ADAPTIVE_CONCURRENCY" help:"let the limiter move the slots between 1 and REFRESH_CONCURRENCY"`
	LeaseDuration        time.Duration `env:"LEASE_DURATION" help:"a lease not renewed this long is taken over; > 0"`
	PollInterval         time.Duration `env:"POLL_INTERVAL" help:"idle poll period; > 0"`
	MaxAttempts          int           `env:"MAX_ATTEMPTS" help:"a user's own failed refreshes before dead-lettering; ≥ 1"`
	MetricsAddr          string        `env:"METRICS_ADDR" help:"host:port serving /metrics, /healthz and /readyz"`
	SLIInterval          time.Duration `env:"SLI_INTERVAL" help:"queue sampling period; > 0"`
	ShutdownTimeout      time.Duration `env:"SHUTDOWN_TIMEOUT" help:"time running refreshes get on SIGTERM; > 0"`
	LogLevel             string        `env:"LOG_LEVEL" help:"debug, info, warn or error"`
	// Beyond the contract's list, each with a default that needs no setting:
	ConnectionBudget int    `env:"MONGODB_CONNECTION_BUDGET" help:"connections one replica may open, for a boot warning only; 0: unstated"`
	RefreshBatchSize int    `env:"REFRESH_BATCH_SIZE" help:"most users one refresh slot recomputes together; 0: by the server (batches where it answers $in from an index, one user per slot on FerretDB), 1 (one by one) to 64 forces it"`
	ChangeStreams    string `env:"CHANGE_STREAMS" help:"auto (wake on inserts where the server has change streams) or off (poll only)"`
}

// CHANGE_STREAMS values. Off suits large fleets, where every replica tailing
// every insert costs more than polling saves (docs/mongodb-at-scale.md).
const (
	ChangeStreamsAuto = "auto"
	ChangeStreamsOff  = "off"
)

// MaxClaimWindow is the largest CLAIM_WINDOW accepted. A claim round's lease read carries one
// name per distinct user of its window in one $in, in one BSON command of at most 16 MiB; an
// element costs its username (at most consumer.MaxUsernameBytes, 256) plus 12 bytes, so about
// 62,600 names fail every round for good. 10,000 are at most 2.7 MB: a sixfold margin.
const MaxClaimWindow = 10_000

// Defaults is the configuration of an empty environment, the pipeline's from
// the packages that give them meaning (a consumer built without this agrees).
func Defaults() Config {
	return Config{
		MongoURI:             "mongodb://localhost:27017",
		Database:             "app",
		QueueCollection:      "score_events",
		ScoresCollection:     "user_scores",
		DeadLetterCollection: "score_events_dead",
		ClaimsCollection:     "score_claims",
		ClaimWindow:          consumer.DefaultClaimWindow,
		MaxUsersInFlight:     consumer.DefaultMaxUsersInFlight,
		RefreshConcurrency:   consumer.DefaultRefreshConcurrency,
		LeaseDuration:        consumer.DefaultLeaseDuration,
		PollInterval:         consumer.DefaultPollInterval,
		MaxAttempts:          consumer.DefaultMaxAttempts,
		MetricsAddr:          ":9090",
		SLIInterval:          metrics.DefaultSampleInterval,
		ShutdownTimeout:      consumer.DefaultShutdownTimeout,
		LogLevel:             "info",
		ScorerTimeout:        scoring.DefaultScorerTimeout,
		ChangeStreams:        ChangeStreamsAuto,
	}
}

// Parse reads the configuration from environ (as os.Environ returns it) and validates it,
// listing every bad variable at once: one crash loop per mistake would not do.
func Parse(environ []string) (Config, error) {
	// env leaves a field alone when its variable is unset or empty.
	cfg := Defaults()
	vars := env.ToMap(environ)
	var problems []string
	failed := map[string]bool{} // variables whose value did not parse
	if err := env.ParseWithOptions(&cfg, env.Options{Environment: vars}); err != nil {
		var agg env.AggregateError
		if !errors.As(err, &agg) {
			agg.Errors = []error{err}
		}
		for _, e := range agg.Errors {
			var pe env.ParseError
			if errors.As(e, &pe) {
				name := envName(pe.Name)
				failed[name] = true
				problems = append(problems, fmt.Sprintf("%s=%q: %v", name, vars[name], describe(pe)))
				continue
			}
			problems = append(problems, e.Error())
		}
	}
	for _, p := range cfg.validate() {
		// A variable that failed to parse holds its zero value: "not
		// positive" as well would only confuse.
		if !failed[p.name] {
			problems = append(problems, p.msg)
		}
	}
	if len(problems) > 0 {
		// Any variable may hold a pasted connection string, and a problem
		// quotes its value: redact them all, with MONGODB_URI's own secrets.
		for i, p := range problems {
			problems[i] = redact.String(p, vars["MONGODB_URI"])
		}
		return cfg, &Error{Problems: problems}
	}
	return cfg, nil
}

// envName maps a Config field name to its variable.
func envName(field string) string {
	if f, ok := reflect.TypeFor[Config]().FieldByName(field); ok {
		return strings.Split(f.Tag.Get("env"), ",")[0]
	}
	return field
}

func describe(pe env.ParseError) string {
	switch pe.Type {
	case reflect.TypeFor[time.Duration]():
		return "not a duration (want a number with a unit, such as 500ms, 30s or 5m)"
	case reflect.TypeFor[int]():
		return "not a whole number"
	case reflect.TypeFor[bool]():
		return "not a boolean (want true or false)"
	}
	return pe.Err.Error()
}

type Error struct{ Problems []string }

func (e *Error) Error() string {
	return fmt.Sprintf("invalid configuration (%d problems):\n  - %s", len(e.Problems), strings.Join(e.Problems, "\n  - "))
}

type problem struct{ name, msg string }

func (c Config) validate() []problem {
	var p []problem
	add := func(bad bool, name, format string, args ...any) { // each message after the variable's name
		if bad {
			p = append(p, problem{name, name + fmt.Sprintf(format, args...)})
		}
	}
	const positive, positiveDuration = "=%d: must be a positive number", "=%s: must be a positive duration such as 30s"
	add(c.ClaimWindow < 1 || c.ClaimWindow > MaxClaimWindow, "CLAIM_WINDOW",
		"=%d: must be between 1 and %d (a claim round sends one username per user of its window in one command, and a command is at most 16 MiB)", c.ClaimWindow, MaxClaimWindow)
	add(c.MaxUsersInFlight <= 0, "MAX_USERS_IN_FLIGHT", positive, c.MaxUsersInFlight)
	add(c.RefreshConcurrency <= 0, "REFRESH_CONCURRENCY", positive, c.RefreshConcurrency)
	add(c.MaxAttempts <= 0, "MAX_ATTEMPTS", positive, c.MaxAttempts)
	add(c.RefreshBatchSize < 0 || c.RefreshBatchSize > scoring.MaxBatchUsers, "REFRESH_BATCH_SIZE",
		"=%d: must be 0 (by the server), 1 (no batching) or up to %d", c.RefreshBatchSize, scoring.MaxBatchUsers)
	add(c.ConnectionBudget < 0, "MONGODB_CONNECTION_BUDGET", "=%d: must be 0 (unstated) or a positive number", c.ConnectionBudget)
	add(c.RefreshConcurrency > 0 && c.MaxUsersInFlight > 0 && c.RefreshConcurrency > c.MaxUsersInFlight, "REFRESH_CONCURRENCY",
		"=%d: must not exceed MAX_USERS_IN_FLIGHT=%d (a refresh slot with no claimed user to run is never used)", c.RefreshConcurrency, c.MaxUsersInFlight)
	add(c.LeaseDuration <= 0, "LEASE_DURATION", positiveDuration, c.LeaseDuration)
	add(c.PollInterval <= 0, "POLL_INTERVAL", positiveDuration, c.PollInterval)
	add(c.SLIInterval <= 0, "SLI_INTERVAL", positiveDuration, c.SLIInterval)
	add(c.ShutdownTimeout <= 0, "SHUTDOWN_TIMEOUT", positiveDuration, c.ShutdownTimeout)
	// The URI and the collection names: none empty, no two collections the same.
	colls := [][2]string{
		{"QUEUE_COLLECTION", c.QueueCollection}, {"SCORES_COLLECTION", c.ScoresCollection},
		{"DEADLETTER_COLLECTION", c.DeadLetterCollection}, {"CLAIMS_COLLECTION", c.ClaimsCollection},
	}
	for _, n := range append([][2]string{{"MONGODB_URI", c.MongoURI}, {"MONGODB_DATABASE", c.Database}}, colls...) {
		add(strings.TrimSpace(n[1]) == "", n[0], ": must not be empty")
	}
	names := map[string]string{}
	for _, n := range colls {
		other, dup := names[n[1]]
		add(dup && n[1] != "", n[0], "=%q: the same collection as %s", n[1], other)
		names[n[1]] = n[0]
	}
	add(c.ChangeStreams != ChangeStreamsAuto && c.ChangeStreams != ChangeStreamsOff, "CHANGE_STREAMS", "=%q: must be %s or %s", c.ChangeStreams, ChangeStreamsAuto, ChangeStreamsOff)
	add(c.MongoURI != "" && !strings.HasPrefix(c.MongoURI, "mongodb://") && !strings.HasPrefix(c.MongoURI, "mongodb+srv://"), "MONGODB_URI",
		"=%s: must start with mongodb:// or mongodb+srv://", redact.URI(c.MongoURI))
	add(c.ScorerTimeout <= 0, "SCORER_TIMEOUT", positiveDuration, c.ScorerTimeout)
	both := c.ScorerURL != "" && c.ScoringRules != ""
	add(both, "SCORING_RULES", "=%s and SCORER_URL are both set: the scores come from rules or from an external scorer, not both", c.ScoringRules)
	add(both, "SCORER_URL", " and SCORING_RULES are both set: unset one")
	u, err := url.Parse(c.ScorerURL)
	add(c.ScorerURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == ""), "SCORER_URL", ": must be an absolute http:// or https:// URL")
	if _, err := ParseLogLevel(c.LogLevel); err != nil {
		p = append(p, problem{"LOG_LEVEL", err.Error()})
	}
	return p
}

func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("LOG_LEVEL=%q: must be one of debug, info, warn, error", s)
}

// LogValue keeps the URI's secrets out of any log line that prints the config.
func (c Config) LogValue() slog.Value {
	type plain Config // drops this method, so AnyValue does not recurse
	c.MongoURI = redact.URI(c.MongoURI)
	if c.ScorerToken != "" {
		c.ScorerToken = redact.Mask
	}
	if u, err := url.Parse(c.ScorerURL); err == nil {
		c.ScorerURL = u.Redacted()
	} else if c.ScorerURL != "" {
		c.ScorerURL = "REDACTED (unparsable)"
	}
	return slog.AnyValue(plain(c))
}

// Variable is one environment variable the service reads.
type Variable struct {
	Name    string // MONGODB_URI
	Default string // its value in Defaults(), as one would write it (30s, not 30000000000)
	Help    string // what it sets and what it accepts, in one line
}

// Variables lists every variable Config reads, in order, with its default and help, never
// reading the environment: `run --help` prints it, and the environment may hold a password.
func Variables() []Variable {
	def := reflect.ValueOf(Defaults())
	typ := def.Type()
	vars := make([]Variable, 0, typ.NumField())
	for i := range typ.NumField() {
		f, value := typ.Field(i), fmt.Sprint(def.Field(i).Interface())
		if f.Type == reflect.TypeFor[time.Duration]() { // Duration.String writes 5m0s; an operator writes 5m
			for _, zero := range []string{"m0s", "h0m"} {
				if strings.HasSuffix(value, zero) {
					value = value[:len(value)-2]
				}
			}
		}
		vars = append(vars, Variable{Name: strings.Split(f.Tag.Get("env"), ",")[0], Default: value, Help: f.Tag.Get("help")})
	}
	return vars
}
