package scoring

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// MaxScorerResponse is the largest body an external scorer may answer with; a longer one fails the request.
const MaxScorerResponse = 16 << 20

// DefaultScorerTimeout is one request's deadline unless SCORER_TIMEOUT says.
const DefaultScorerTimeout = 10 * time.Second

// HTTPScorerConfig configures an external scorer (SCORER_URL).
type HTTPScorerConfig struct {
	URL     string
	Token   string                                // if set, sent as "Authorization: Bearer <Token>"; secret: no error or log has it
	Timeout time.Duration                         // one request's deadline, whole (SCORER_TIMEOUT); default 10s
	Conns   int                                   // keep-alive connections kept: one per refresh slot (REFRESH_CONCURRENCY); default 16
	Observe func(outcome string, seconds float64) // if set, gets each request's outcome and duration (metrics)
}

// HTTPScorer asks an external service for scores, one POST per batch (docs/scorers.md).
type HTTPScorer struct {
	cfg    HTTPScorerConfig
	where  string // the URL without credentials, for errors
	client *http.Client
}

// NewHTTPScorer returns a scorer posting to cfg.URL with a client of its own: every phase of a
// request bounded, its keep-alive pool sized to the refresh slots (no connection per request).
func NewHTTPScorer(cfg HTTPScorerConfig) (*HTTPScorer, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("the scorer's URL must be an absolute http:// or https:// URL")
	}
	cfg.Timeout = cmp.Or(max(cfg.Timeout, 0), DefaultScorerTimeout)
	cfg.Conns = cmp.Or(max(cfg.Conns, 0), 16)
	bound := min(cfg.Timeout, 10*time.Second)
	transport := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: bound, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   bound,
		ResponseHeaderTimeout: cfg.Timeout,
		MaxIdleConns:          cfg.Conns,
		MaxIdleConnsPerHost:   cfg.Conns,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &HTTPScorer{cfg: cfg, where: u.Redacted(), client: &http.Client{Transport: transport, Timeout: cfg.Timeout}}, nil
}

// Score implements Scorer.
func (s *HTTPScorer) Score(ctx context.Context, users []string, asOf time.Time) (map[string]Result, map[string]error, error) {
	start := time.Now()
	results, failed, err := s.score(ctx, users, asOf)
	if s.cfg.Observe != nil {
		s.cfg.Observe(scorerOutcome(err), time.Since(start).Seconds())
	}
	if err != nil {
		// %v, not %w: a scorer's timeout must not read as MongoDB unreachable, never charged (see Scorer).
		return nil, nil, fmt.Errorf("asking the scorer at %s for %d users: %v", s.where, len(users), err)
	}
	return results, failed, nil
}

func (s *HTTPScorer) score(ctx context.Context, users []string, asOf time.Time) (map[string]Result, map[string]error, error) {
	body, _ := json.Marshal(struct { // strings: it cannot fail
		Users []string `json:"users"`
		AsOf  string   `json:"asOf"`
	}{users, asOf.UTC().Format("2006-01-02T15:04:05.000Z07:00")})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return nil, nil, errors.New("building the request failed") // the URL was checked at start
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if s.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+s.cfg.Token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, nil, stripURL(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxScorerResponse+1))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the answer: %w", stripURL(err))
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("the scorer answered %s: %s", resp.Status, s.snippet(raw))
	}
	if len(raw) > MaxScorerResponse {
		return nil, nil, fmt.Errorf("the answer is larger than %d MiB", MaxScorerResponse>>20)
	}
	return decodeScores(raw, users)
}

// decodeScores checks the answer's shape: every user in exactly one of scores and errors, each
// score a finite number, components (optional) an object of finite numbers; other keys ignored.
func decodeScores(raw []byte, users []string) (map[string]Result, map[string]error, error) {
	var r struct {
		Scores map[string]json.RawMessage `json:"scores"`
		Errors map[string]string          `json:"errors"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, nil, fmt.Errorf("the answer is not the scores object: %v", err)
	}
	results := make(map[string]Result, len(users))
	failed := map[string]error{}
	for _, u := range users {
		scoreRaw, scored := r.Scores[u]
		msg, erred := r.Errors[u]
		switch {
		case scored && erred:
			return nil, nil, fmt.Errorf("user %q is in both scores and errors", u)
		case erred:
			failed[u] = fmt.Errorf("the scorer failed this user: %s", msg)
		case !scored:
			return nil, nil, fmt.Errorf("user %q is in neither scores nor errors", u)
		default:
			var sc struct {
				Score      *float64           `json:"score"`
				Components map[string]float64 `json:"components"`
			}
			if err := json.Unmarshal(scoreRaw, &sc); err != nil {
				return nil, nil, fmt.Errorf("the score of user %q is not {\"score\": number, \"components\": {...}}: %v", u, err)
			}
			if sc.Score == nil || math.IsNaN(*sc.Score) || math.IsInf(*sc.Score, 0) {
				return nil, nil, fmt.Errorf("the score of user %q is missing or not a finite number", u)
			}
			results[u] = Result{Score: *sc.Score, Components: maps.Collect(maps.All(sc.Components))} // never nil
		}
	}
	return results, failed, nil
}

// snippet is an error body's start, for the dead letter's reason, without the token should the scorer echo it.
func (s *HTTPScorer) snippet(b []byte) string {
	out := string(b)
	if s.cfg.Token != "" {
		out = strings.ReplaceAll(out, s.cfg.Token, "REDACTED")
	}
	if len(out) > 200 {
		return out[:200] + "…"
	}
	return out
}

// stripURL drops the URL (it may hold credentials) from a client error; Score names it redacted.
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// scorerOutcome labels a request in scorerefresh_scorer_requests_total: a timeout is
// SCORER_TIMEOUT, the refresh's own deadline, or a dial or read timeout.
func scorerOutcome(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case err != nil:
		return "error"
	}
	return "ok"
}
