package config

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/scorerefresh/scorerefresh/consumer"
	"github.com/scorerefresh/scorerefresh/scoring"
)

func TestDefaultsAreTheContracts(t *testing.T) {
	t.Parallel()
	cfg, err := Parse(nil)
	if err != nil {
		t.Fatalf("Parse(empty environment): %v", err)
	}
	want := Config{
		MongoURI: "mongodb://localhost:27017", Database: "app",
		QueueCollection: "score_events", ScoresCollection: "user_scores",
		DeadLetterCollection: "score_events_dead", ClaimsCollection: "score_claims",
		ClaimWindow: 500, MaxUsersInFlight: 64, RefreshConcurrency: 16,
		LeaseDuration: 60 * time.Second, PollInterval: time.Second, MaxAttempts: 5,
		MetricsAddr: ":9090", SLIInterval: 15 * time.Second, ShutdownTimeout: 25 * time.Second,
		LogLevel: "info", RefreshBatchSize: 0, ScorerTimeout: 10 * time.Second,
		ChangeStreams: "auto",
	}
	if cfg != want {
		t.Errorf("defaults:\n got %+v\nwant %+v", cfg, want)
	}
}

func TestEveryVariableIsRead(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]string{
		"MONGODB_URI=mongodb://db:27017/?replicaSet=rs0", "MONGODB_DATABASE=prod",
		"QUEUE_COLLECTION=q", "SCORES_COLLECTION=s", "DEADLETTER_COLLECTION=d", "CLAIMS_COLLECTION=c",
		"SCORING_RULES=/etc/rules.yaml", "CLAIM_WINDOW=1000", "MAX_USERS_IN_FLIGHT=128",
		"REFRESH_CONCURRENCY=32", "ADAPTIVE_CONCURRENCY=true", "LEASE_DURATION=2m", "POLL_INTERVAL=250ms",
		"MAX_ATTEMPTS=7", "METRICS_ADDR=:9100", "SLI_INTERVAL=5s", "SHUTDOWN_TIMEOUT=10s", "LOG_LEVEL=debug",
		"MONGODB_CONNECTION_BUDGET=40", "REFRESH_BATCH_SIZE=32",
		"CHANGE_STREAMS=off", "SCORER_TOKEN=t0ken", "SCORER_TIMEOUT=3s",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		MongoURI: "mongodb://db:27017/?replicaSet=rs0", Database: "prod",
		QueueCollection: "q", ScoresCollection: "s", DeadLetterCollection: "d", ClaimsCollection: "c",
		ScoringRules: "/etc/rules.yaml", ClaimWindow: 1000, MaxUsersInFlight: 128, RefreshConcurrency: 32,
		AdaptiveConcurrency: true, LeaseDuration: 2 * time.Minute, PollInterval: 250 * time.Millisecond,
		MaxAttempts: 7, MetricsAddr: ":9100", SLIInterval: 5 * time.Second, ShutdownTimeout: 10 * time.Second,
		LogLevel: "debug", ConnectionBudget: 40, RefreshBatchSize: 32,
		ChangeStreams: "off", ScorerToken: "t0ken", ScorerTimeout: 3 * time.Second,
	}
	if cfg != want {
		t.Errorf("got %+v\nwant %+v", cfg, want)
	}
}

func TestEveryBadVariableIsListedOnce(t *testing.T) {
	t.Parallel()
	_, err := Parse([]string{
		"CLAIM_WINDOW=abc", "MAX_USERS_IN_FLIGHT=0", "REFRESH_CONCURRENCY=-3", "LEASE_DURATION=60",
		"POLL_INTERVAL=-1s", "MAX_ATTEMPTS=zero", "SLI_INTERVAL=0s", "SHUTDOWN_TIMEOUT=soon",
		"ADAPTIVE_CONCURRENCY=maybe", "LOG_LEVEL=verbose", "MONGODB_URI=postgres://u:hunter2@h/db",
		"DEADLETTER_COLLECTION=score_claims", "CHANGE_STREAMS=no",
	})
	var cerr *Error
	if !errors.As(err, &cerr) {
		t.Fatalf("want *Error, got %v", err)
	}
	for _, v := range []string{"CLAIM_WINDOW", "MAX_USERS_IN_FLIGHT", "REFRESH_CONCURRENCY", "LEASE_DURATION",
		"POLL_INTERVAL", "MAX_ATTEMPTS", "SLI_INTERVAL", "SHUTDOWN_TIMEOUT", "ADAPTIVE_CONCURRENCY",
		"LOG_LEVEL", "MONGODB_URI", "CLAIMS_COLLECTION", "CHANGE_STREAMS"} {
		n := 0
		for _, p := range cerr.Problems {
			if strings.HasPrefix(p, v+"=") || strings.HasPrefix(p, v+":") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s named in %d problems, want 1:\n%s", v, n, err)
		}
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("the password reached the error message: %s", err)
	}
}

func TestConcurrencyMustNotExceedUsersInFlight(t *testing.T) {
	t.Parallel()
	_, err := Parse([]string{"REFRESH_CONCURRENCY=65", "MAX_USERS_IN_FLIGHT=64"})
	if err == nil || !strings.Contains(err.Error(), "REFRESH_CONCURRENCY=65: must not exceed MAX_USERS_IN_FLIGHT=64") {
		t.Errorf("got %v", err)
	}
	if _, err := Parse([]string{"REFRESH_CONCURRENCY=64", "MAX_USERS_IN_FLIGHT=64"}); err != nil {
		t.Errorf("equal values rejected: %v", err)
	}
}

// secretURIs are MONGODB_URI values whose secret (hunter2) must reach no
// error message and no log line, whatever their shape.
var secretURIs = []string{
	"admin:hunter2@host:27017",
	"mongodb//admin:hunter2@host:27017",
	"mongodb:/admin:hunter2@host",
	"mongodb:admin:hunter2@host",
	"postgres://admin:hunter2@host/db",
	"mongodb://admin:hunter2@h1,h2/?replicaSet=rs0",
	"mongodb://admin:hunt%65r2@host",
	"mongodb://admin:p@hunter2@host",
	"mongodb://host/?tls=true&tlsCertificateKeyFilePassword=hunter2",
	"mongodb://host/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:hunter2",
	"mongodb+srv://cluster0.example.net/?proxyPassword=hunter2",
	"  mongodb://admin:hunter2@host",
}

func TestBootErrorHidesSecretsWhateverTheURIShape(t *testing.T) {
	t.Parallel()
	for _, uri := range secretURIs {
		// A bad CLAIM_WINDOW forces an error even for a valid URI.
		_, err := Parse([]string{"MONGODB_URI=" + uri, "CLAIM_WINDOW=0"})
		if err == nil {
			t.Fatalf("%q: no error", uri)
		}
		if msg := err.Error(); strings.Contains(msg, "hunter2") || strings.Contains(msg, "hunt%65r2") {
			t.Errorf("%q: the secret reached the error:\n%s", uri, msg)
		}
	}
}

func TestEveryProblemIsRedacted(t *testing.T) {
	t.Parallel()
	// A URI pasted into the wrong variable is as secret as in the right one.
	_, err := Parse([]string{"CLAIM_WINDOW=mongodb://admin:hunter2@host"})
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "CLAIM_WINDOW") {
		t.Errorf("got %v", err)
	}
}

func TestLogValueHidesSecrets(t *testing.T) {
	t.Parallel()
	for _, uri := range secretURIs {
		cfg := Config{MongoURI: uri, Database: "app"}
		var sb strings.Builder
		logTo(&sb).Info("consumer starting", "config", cfg)
		if strings.Contains(sb.String(), "hunter2") || strings.Contains(sb.String(), "hunt%65r2") || !strings.Contains(sb.String(), "REDACTED") {
			t.Errorf("%q: log line %s", uri, sb.String())
		}
	}
}

// TestClaimWindowIsBounded: a window past MaxClaimWindow stops the boot
// with the bound in the message, beside every other problem, and the
// largest accepted one is taken.
func TestClaimWindowIsBounded(t *testing.T) {
	t.Parallel()
	_, err := Parse([]string{"CLAIM_WINDOW=100000", "MAX_ATTEMPTS=0"})
	want := fmt.Sprintf("CLAIM_WINDOW=100000: must be between 1 and %d", MaxClaimWindow)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "MAX_ATTEMPTS=0") {
		t.Errorf("got %v, want it to contain %q and the MAX_ATTEMPTS problem", err, want)
	}
	cfg, err := Parse([]string{fmt.Sprintf("CLAIM_WINDOW=%d", MaxClaimWindow)})
	if err != nil || cfg.ClaimWindow != MaxClaimWindow {
		t.Errorf("CLAIM_WINDOW=%d: got %d, %v", MaxClaimWindow, cfg.ClaimWindow, err)
	}
}

// TestLargestClaimWindowFitsACommand builds the lease read's filter for the
// largest window, every user distinct and of the longest username the
// contract accepts: it must stay well inside MongoDB's 16 MiB.
func TestLargestClaimWindowFitsACommand(t *testing.T) {
	t.Parallel()
	users := make([]string, MaxClaimWindow)
	for i := range users {
		users[i] = fmt.Sprintf("%0*d", consumer.MaxUsernameBytes, i)
	}
	filter, err := bson.Marshal(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: users}}}})
	if err != nil {
		t.Fatal(err)
	}
	const maxCommand = 16 << 20
	if len(filter) > maxCommand/4 {
		t.Errorf("the largest window's $in is %d bytes, more than a quarter of MongoDB's %d", len(filter), maxCommand)
	}
}

// TestVariablesDescribeEveryField pins what `run --help` prints: one entry
// per field, in order, each with a one-line help and a default that, set
// as written, is the default.
func TestVariablesDescribeEveryField(t *testing.T) {
	t.Parallel()
	vars := Variables()
	typ := reflect.TypeFor[Config]()
	if len(vars) != typ.NumField() {
		t.Fatalf("%d variables for %d fields", len(vars), typ.NumField())
	}
	for i, v := range vars {
		if want := envName(typ.Field(i).Name); v.Name != want {
			t.Errorf("variable %d is %q, field %s reads %q", i, v.Name, typ.Field(i).Name, want)
		}
		if strings.TrimSpace(v.Help) == "" || strings.Contains(v.Help, "\n") {
			t.Errorf("%s: help %q, want one line", v.Name, v.Help)
		}
		cfg, err := Parse([]string{v.Name + "=" + v.Default})
		if err != nil || cfg != Defaults() {
			t.Errorf("%s=%s (its printed default) gives %+v, %v; want the defaults", v.Name, v.Default, cfg, err)
		}
	}
	for _, v := range vars {
		switch v.Name {
		case "LEASE_DURATION":
			if v.Default != "1m" {
				t.Errorf("LEASE_DURATION's default printed %q, want 1m", v.Default)
			}
		case "REFRESH_BATCH_SIZE":
			if !strings.Contains(v.Help, strconv.Itoa(scoring.MaxBatchUsers)) {
				t.Errorf("REFRESH_BATCH_SIZE's help %q does not give the bound %d", v.Help, scoring.MaxBatchUsers)
			}
		}
	}
}

// TestScorerSettings: SCORER_URL is read and checked, SCORING_RULES with it
// is an error naming both, and neither the token nor the URL's password
// reaches a log line.
func TestScorerSettings(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]string{"SCORER_URL=https://scorer.internal:8443/score", "SCORER_TOKEN=s3cret-t0ken"})
	if err != nil || cfg.ScorerURL != "https://scorer.internal:8443/score" {
		t.Fatalf("got %q, %v", cfg.ScorerURL, err)
	}
	_, err = Parse([]string{"SCORER_URL=https://scorer.internal/score", "SCORING_RULES=/etc/rules.yaml", "SCORER_TIMEOUT=0s"})
	for _, want := range []string{"SCORING_RULES", "SCORER_URL", "SCORER_TIMEOUT"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("both scorers and a zero timeout: error %v does not name %s", err, want)
		}
	}
	if _, err := Parse([]string{"SCORER_URL=scorer.internal/score"}); err == nil || !strings.Contains(err.Error(), "SCORER_URL") {
		t.Errorf("a relative SCORER_URL: %v", err)
	}
	var sb strings.Builder
	logTo(&sb).Info("consumer starting", "config", Config{ScorerURL: "https://bob:hunter2@scorer.internal/score", ScorerToken: "s3cret-t0ken"})
	if strings.Contains(sb.String(), "hunter2") || strings.Contains(sb.String(), "s3cret-t0ken") {
		t.Errorf("a secret reached the log line: %s", sb.String())
	}
}
