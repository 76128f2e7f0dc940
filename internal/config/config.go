// Package config reads the service's environment (docs/contract.md) once, in
// cmd/, and hands plain values down. Packages below cmd/ never read the
// environment themselves.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/scorerefresh/scorerefresh/pkg/redact"
	"github.com/scorerefresh/scorerefresh/scoring"
)

// Config is every variable of the contract (docs/contract.md), with its default.
type Config struct {
	MongoURI             string        `env:"MONGODB_URI" envDefault:"mongodb://localhost:27017"`
	Database             string        `env:"MONGODB_DATABASE" envDefault:"app"`
	QueueCollection      string        `env:"QUEUE_COLLECTION" envDefault:"score_events"`
	ScoresCollection     string        `env:"SCORES_COLLECTION" envDefault:"user_scores"`
	DeadLetterCollection string        `env:"DEADLETTER_COLLECTION" envDefault:"score_events_dead"`
	ClaimsCollection     string        `env:"CLAIMS_COLLECTION" envDefault:"score_claims"`
	ScoringRules         string        `env:"SCORING_RULES"` // empty: the built-in default rules
	ClaimWindow          int           `env:"CLAIM_WINDOW" envDefault:"500"`
	MaxUsersInFlight     int           `env:"MAX_USERS_IN_FLIGHT" envDefault:"64"`
	RefreshConcurrency   int           `env:"REFRESH_CONCURRENCY" envDefault:"16"`
	AdaptiveConcurrency  bool          `env:"ADAPTIVE_CONCURRENCY" envDefault:"false"`
	LeaseDuration        time.Duration `env:"LEASE_DURATION" envDefault:"60s"`
	PollInterval         time.Duration `env:"POLL_INTERVAL" envDefault:"1s"`
	MaxAttempts          int           `env:"MAX_ATTEMPTS" envDefault:"5"`
	MetricsAddr          string        `env:"METRICS_ADDR" envDefault:":9090"`
	SLIInterval          time.Duration `env:"SLI_INTERVAL" envDefault:"15s"`
	ShutdownTimeout      time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"25s"`
	LogLevel             string        `env:"LOG_LEVEL" envDefault:"info"`
	// ConnectionBudget is the MongoDB connections one replica may open; 0
	// means unstated. Beyond the contract (docs/contract.md): only a boot-time warning uses it.
	ConnectionBudget int `env:"MONGODB_CONNECTION_BUDGET" envDefault:"0"`
	// RefreshBatchSize is how many users one refresh slot recomputes
	// together (one query per rule component for the whole batch); 1
	// refreshes users one by one. Beyond the contract's list, like the
	// linger below.
	RefreshBatchSize int `env:"REFRESH_BATCH_SIZE" envDefault:"16"`
	// RefreshBatchLinger is how long a batch that has its slot waits for
	// more users before it runs.
	RefreshBatchLinger time.Duration `env:"REFRESH_BATCH_LINGER" envDefault:"5ms"`
}

// Parse reads the configuration from environ (as os.Environ returns it) and
// validates it. The error lists every bad variable at once, so an operator
// fixes a manifest in one go instead of one crash loop per mistake.
func Parse(environ []string) (Config, error) {
	var cfg Config
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
		// A variable that failed to parse holds its zero value: reporting
		// that it is also "not positive" would only confuse.
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

// Error lists every problem found in the environment.
type Error struct{ Problems []string }

func (e *Error) Error() string {
	return fmt.Sprintf("invalid configuration (%d problems):\n  - %s", len(e.Problems), strings.Join(e.Problems, "\n  - "))
}

type problem struct{ name, msg string }

func (c Config) validate() []problem {
	var p []problem
	add := func(name, format string, args ...any) {
		p = append(p, problem{name, name + fmt.Sprintf(format, args...)})
	}
	positive := func(name string, v int) {
		if v <= 0 {
			add(name, "=%d: must be a positive number", v)
		}
	}
	positiveDur := func(name string, v time.Duration) {
		if v <= 0 {
			add(name, "=%s: must be a positive duration such as 30s", v)
		}
	}
	nonEmpty := func(name, v string) {
		if strings.TrimSpace(v) == "" {
			add(name, ": must not be empty")
		}
	}
	positive("CLAIM_WINDOW", c.ClaimWindow)
	positive("MAX_USERS_IN_FLIGHT", c.MaxUsersInFlight)
	positive("REFRESH_CONCURRENCY", c.RefreshConcurrency)
	positive("MAX_ATTEMPTS", c.MaxAttempts)
	if c.RefreshBatchSize < 1 || c.RefreshBatchSize > scoring.MaxBatchUsers {
		add("REFRESH_BATCH_SIZE", "=%d: must be between 1 (no batching) and %d", c.RefreshBatchSize, scoring.MaxBatchUsers)
	}
	positiveDur("REFRESH_BATCH_LINGER", c.RefreshBatchLinger)
	if c.ConnectionBudget < 0 {
		add("MONGODB_CONNECTION_BUDGET", "=%d: must be 0 (unstated) or a positive number", c.ConnectionBudget)
	}
	if c.RefreshConcurrency > 0 && c.MaxUsersInFlight > 0 && c.RefreshConcurrency > c.MaxUsersInFlight {
		add("REFRESH_CONCURRENCY", "=%d: must not exceed MAX_USERS_IN_FLIGHT=%d (a refresh slot with no claimed user to run is never used)", c.RefreshConcurrency, c.MaxUsersInFlight)
	}
	positiveDur("LEASE_DURATION", c.LeaseDuration)
	positiveDur("POLL_INTERVAL", c.PollInterval)
	positiveDur("SLI_INTERVAL", c.SLIInterval)
	positiveDur("SHUTDOWN_TIMEOUT", c.ShutdownTimeout)
	nonEmpty("MONGODB_URI", c.MongoURI)
	nonEmpty("MONGODB_DATABASE", c.Database)
	nonEmpty("QUEUE_COLLECTION", c.QueueCollection)
	nonEmpty("SCORES_COLLECTION", c.ScoresCollection)
	nonEmpty("DEADLETTER_COLLECTION", c.DeadLetterCollection)
	nonEmpty("CLAIMS_COLLECTION", c.ClaimsCollection)
	names := map[string]string{}
	for _, n := range [][2]string{
		{"QUEUE_COLLECTION", c.QueueCollection}, {"SCORES_COLLECTION", c.ScoresCollection},
		{"DEADLETTER_COLLECTION", c.DeadLetterCollection}, {"CLAIMS_COLLECTION", c.ClaimsCollection},
	} {
		if other, dup := names[n[1]]; dup && n[1] != "" {
			add(n[0], "=%q: the same collection as %s", n[1], other)
		}
		names[n[1]] = n[0]
	}
	if c.MongoURI != "" && !strings.HasPrefix(c.MongoURI, "mongodb://") && !strings.HasPrefix(c.MongoURI, "mongodb+srv://") {
		add("MONGODB_URI", "=%s: must start with mongodb:// or mongodb+srv://", redact.URI(c.MongoURI))
	}
	if _, err := ParseLogLevel(c.LogLevel); err != nil {
		p = append(p, problem{"LOG_LEVEL", err.Error()})
	}
	return p
}

// ParseLogLevel maps LOG_LEVEL to a slog level.
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
	return slog.AnyValue(plain(c))
}
