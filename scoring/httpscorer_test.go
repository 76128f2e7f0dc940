package scoring

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// scorerServer is an external scorer on loopback answering each request
// with answer's status and body.
func scorerServer(t *testing.T, answer func(users []string, r *http.Request) (int, string)) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Users []string `json:"users"`
			AsOf  string   `json:"asOf"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		code, body := answer(req.Users, r)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

type observed struct {
	mu       sync.Mutex
	outcomes []string
}

func (o *observed) observe(outcome string, _ float64) {
	o.mu.Lock()
	o.outcomes = append(o.outcomes, outcome)
	o.mu.Unlock()
}

func newTestScorer(t *testing.T, url string, cfg HTTPScorerConfig, obs *observed) *HTTPScorer {
	t.Helper()
	cfg.URL = url
	if obs != nil {
		cfg.Observe = obs.observe
	}
	s, err := NewHTTPScorer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestHTTPScorerRequestAndAnswer: the request is the contract's (POST,
// JSON, users, asOf in milliseconds UTC, the bearer token), and an answer
// of scores and per-user errors comes back as results and failed users.
func TestHTTPScorerRequestAndAnswer(t *testing.T) {
	t.Parallel()
	var got struct {
		method, ctype, auth string
		body                map[string]any
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.method, got.ctype, got.auth = r.Method, r.Header.Get("Content-Type"), r.Header.Get("Authorization")
		_ = json.NewDecoder(r.Body).Decode(&got.body)
		_, _ = io.WriteString(w, `{"scores": {"alice": {"score": 12.5, "components": {"posts": 2.5}}, "{\"$gt\": \"\"}": {"score": 1}},
			"errors": {"bob": "no such user upstream"}, "took_ms": 3}`)
	}))
	t.Cleanup(srv.Close)
	obs := &observed{}
	s := newTestScorer(t, srv.URL, HTTPScorerConfig{Token: "s3cret"}, obs)
	asOf := time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.FixedZone("x", 3600))
	users := []string{"alice", "bob", `{"$gt": ""}`}
	results, failed, err := s.Score(context.Background(), users, asOf)
	if err != nil {
		t.Fatal(err)
	}
	if got.method != http.MethodPost || got.ctype != "application/json" || got.auth != "Bearer s3cret" {
		t.Errorf("request %s, Content-Type %q, Authorization %q", got.method, got.ctype, got.auth)
	}
	if got.body["asOf"] != "2026-12-01T09:00:00.123Z" || fmt.Sprint(got.body["users"]) != fmt.Sprint([]any{"alice", "bob", `{"$gt": ""}`}) {
		t.Errorf("request body %v", got.body)
	}
	if r := results["alice"]; r.Score != 12.5 || r.Components["posts"] != 2.5 {
		t.Errorf("alice: %+v", r)
	}
	if r, ok := results[`{"$gt": ""}`]; !ok || r.Score != 1 || r.Components == nil {
		t.Errorf("a username that looks like an operator: %+v, %v (components must be {} when absent)", r, ok)
	}
	if err := failed["bob"]; err == nil || !strings.Contains(err.Error(), "no such user upstream") {
		t.Errorf("bob: %v, want the scorer's reason", err)
	}
	if _, ok := results["bob"]; ok {
		t.Error("bob has a score and an error")
	}
	if fmt.Sprint(obs.outcomes) != "[ok]" {
		t.Errorf("outcomes %v, want [ok]", obs.outcomes)
	}
}

// TestHTTPScorerRefusesMalformedAnswers: any answer not of the contract's
// shape fails the whole request, and nothing of it is taken.
func TestHTTPScorerRefusesMalformedAnswers(t *testing.T) {
	t.Parallel()
	big := `{"scores": {"a": {"score": 1, "components": {"x": 1}}}, "pad": "` + strings.Repeat("x", 20<<20) + `"}`
	for name, tc := range map[string]struct {
		code int
		body string
		want string
	}{
		"a user missing":          {200, `{"scores": {"a": {"score": 1}}}`, `"b" is in neither`},
		"a user in both":          {200, `{"scores": {"a": {"score": 1}, "b": {"score": 2}}, "errors": {"b": "x"}}`, `"b" is in both`},
		"a string score":          {200, `{"scores": {"a": {"score": "12"}, "b": {"score": 2}}}`, `score of user "a"`},
		"NaN":                     {200, `{"scores": {"a": {"score": NaN}, "b": {"score": 2}}}`, "not the scores object"},
		"a null score":            {200, `{"scores": {"a": {"score": null}, "b": {"score": 2}}}`, "missing or not a finite number"},
		"a component not numeric": {200, `{"scores": {"a": {"score": 1, "components": {"x": "1"}}, "b": {"score": 2}}}`, `score of user "a"`},
		"not an object":           {200, `[1, 2]`, "not the scores object"},
		"a 500":                   {500, `{"error": "database down"}`, "500 Internal Server Error"},
		"20 MiB of JSON":          {200, big, "larger than 16 MiB"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := scorerServer(t, func([]string, *http.Request) (int, string) { return tc.code, tc.body })
			obs := &observed{}
			s := newTestScorer(t, srv.URL, HTTPScorerConfig{}, obs)
			results, failed, err := s.Score(context.Background(), []string{"a", "b"}, time.Now())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to say %q", err, tc.want)
			}
			if results != nil || failed != nil {
				t.Errorf("a failed request returned results %v, failed %v", results, failed)
			}
			if fmt.Sprint(obs.outcomes) != "[error]" {
				t.Errorf("outcomes %v, want [error]", obs.outcomes)
			}
		})
	}
}

// TestHTTPScorerBoundsEveryRequest: a scorer that never answers, and one
// whose body never ends, each fail within SCORER_TIMEOUT as a timeout; an
// error body that echoes the token does not carry it into the error.
func TestHTTPScorerBoundsEveryRequest(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hang.Close)
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"scores": {"a": {"score": 1}}, "pad": "`)
		w.(http.Flusher).Flush()
		for {
			select {
			case <-release:
				return
			case <-r.Context().Done():
				return
			default:
			}
			if _, err := io.WriteString(w, "xxxxxxxx"); err != nil {
				return
			}
			time.Sleep(time.Millisecond) // a trickle, not a flood: the deadline must end it
		}
	}))
	t.Cleanup(endless.Close)
	// Registered last, so it runs first: Close waits for the handlers.
	t.Cleanup(func() { close(release) })
	for name, url := range map[string]string{"never answers": hang.URL, "never ends": endless.URL} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			obs := &observed{}
			s := newTestScorer(t, url, HTTPScorerConfig{Timeout: 300 * time.Millisecond}, obs)
			_, _, err := s.Score(context.Background(), []string{"a"}, time.Now())
			if err == nil {
				t.Fatal("no error from a scorer that does not answer")
			}
			if fmt.Sprint(obs.outcomes) != "[timeout]" {
				t.Errorf("outcomes %v, want [timeout] (%v)", obs.outcomes, err)
			}
		})
	}
	t.Run("token echoed", func(t *testing.T) {
		t.Parallel()
		srv := scorerServer(t, func(_ []string, r *http.Request) (int, string) {
			return 401, "refused " + r.Header.Get("Authorization")
		})
		s := newTestScorer(t, srv.URL, HTTPScorerConfig{Token: "s3cret-t0ken"}, nil)
		_, _, err := s.Score(context.Background(), []string{"a"}, time.Now())
		if err == nil || strings.Contains(err.Error(), "s3cret-t0ken") || !strings.Contains(err.Error(), "401") {
			t.Errorf("error %v: want the 401 without the token", err)
		}
	})
}
