package consumer

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/metrics"
	"github.com/scorerefresh/scorerefresh/pkg/clock"
)

const (
	streamRetryAfter  = 5 * time.Minute // after falling back to polling, try the stream again
	maxStreamFailures = 5               // consecutive stream errors before falling back
)

// changeStream is the part of *mongo.ChangeStream the source uses.
type changeStream interface {
	Next(ctx context.Context) bool
	Decode(v any) error
	ResumeToken() bson.Raw
	Err() error
	Close(ctx context.Context) error
}

// ChangeStreamSource wakes the claim loop the moment a producer inserts into
// the queue: it watches inserts projected to their resume token, resumes after
// a transient error, opens a fresh stream after an invalidation. Without change
// streams (standalone mongod, FerretDB) or while they keep failing, it reports
// polling as the active source and tries again streamRetryAfter later.
type ChangeStreamSource struct {
	clock   clock.Clock                                                           // what retries wait on
	watch   func(ctx context.Context, resumeAfter bson.Raw) (changeStream, error) // inserts, after the token if set
	metrics *metrics.Consumer
	log     *slog.Logger
	active  string // metrics.WakeupChangeStream or metrics.WakeupPoll; "" before the first attempt
}

// NewChangeStreamSource watches inserts into queue; retries wait on clk (nil: the wall clock).
func NewChangeStreamSource(queue *mongo.Collection, clk clock.Clock, m *metrics.Consumer, log *slog.Logger) *ChangeStreamSource {
	pipeline := mongo.Pipeline{
		{{Key: "$match", Value: bson.D{{Key: "operationType", Value: "insert"}}}},
		{{Key: "$project", Value: bson.D{{Key: "_id", Value: 1}}}},
	}
	watch := func(ctx context.Context, token bson.Raw) (changeStream, error) {
		opts := options.ChangeStream()
		if token != nil {
			opts.SetResumeAfter(token)
		}
		return queue.Watch(ctx, pipeline, opts)
	}
	return &ChangeStreamSource{clock: clock.Or(clk), watch: watch, metrics: m, log: cmp.Or(log, slog.New(slog.DiscardHandler))}
}

// Run watches until ctx ends.
func (s *ChangeStreamSource) Run(ctx context.Context, wake func()) error {
	var token bson.Raw
	failures := 0
	for ctx.Err() == nil {
		stream, err := s.watch(ctx, token)
		invalidated := false
		if err == nil {
			if token, invalidated, err = s.drain(ctx, stream, token, &failures, wake); ctx.Err() != nil {
				return nil
			}
		}
		poll := unsupported(err)
		if invalidated && !poll {
			// A fresh stream, not startAfter: the driver gives no token of an
			// invalidate event $match filtered out.
			s.log.Info("change stream invalidated (the queue collection was dropped or renamed); opening a fresh one", "op", "change stream", "err", err)
		}
		if poll || invalidated || tokenUnusable(err) {
			token = nil // start from now: polling has covered the gap
		}
		if !poll {
			if failures++; failures >= maxStreamFailures {
				poll, failures = true, 0
			}
		}
		wait := streamRetryAfter
		if poll {
			s.use(metrics.WakeupPoll, err)
		} else {
			s.log.Debug("change stream interrupted; resuming", "op", "change stream", "attempt", failures, "err", err)
			wait = Backoff{Base: 100 * time.Millisecond, Max: 10 * time.Second}.Delay(failures)
		}
		if clock.Sleep(ctx, s.clock, wait) != nil {
			return nil
		}
	}
	return nil
}

// drain wakes the claim loop for each event until the stream ends, closes it,
// and returns the token to resume from, whether it was invalidated, its error.
func (s *ChangeStreamSource) drain(ctx context.Context, stream changeStream, token bson.Raw, failures *int, wake func()) (bson.Raw, bool, error) {
	s.use(metrics.WakeupChangeStream, nil)
	invalidated := false
	for stream.Next(ctx) {
		var ev struct {
			OperationType string `bson:"operationType"`
		}
		if stream.Decode(&ev) == nil && ev.OperationType == "invalidate" {
			token, invalidated = nil, true
			break
		}
		token = stream.ResumeToken()
		*failures = 0
		s.metrics.Wakeups.WithLabelValues(metrics.WakeupChangeStream).Inc()
		wake()
	}
	err := stream.Err()
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), streamClose)
	_ = stream.Close(closeCtx)
	cancel()
	// A stream ends without an error only when invalidated, the event hidden by
	// our $match: resuming from the last insert's token would meet it again, for good.
	invalidated = invalidated || err == nil
	if ctx.Err() == nil { // for what arrived while it was down
		wake()
	}
	return token, invalidated, err
}

// use records which source is active, logging only a change.
func (s *ChangeStreamSource) use(source string, why error) {
	if s.active == source {
		return
	}
	s.active = source
	other := metrics.WakeupPoll
	if source == metrics.WakeupPoll {
		other = metrics.WakeupChangeStream
		s.log.Info("change streams unavailable; waking on POLL_INTERVAL polling", "op", "change stream", "retry_in", streamRetryAfter, "reason", why)
	} else {
		s.log.Info("change stream open; new entries wake the consumer at once", "op", "change stream")
	}
	s.metrics.WakeupSource.WithLabelValues(source).Set(1)
	s.metrics.WakeupSource.WithLabelValues(other).Set(0)
}

// unsupported reports a server without change streams: standalone mongod
// (40573), FerretDB and others (NotImplemented 238, CommandNotSupported 115).
func unsupported(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && (se.HasErrorCode(40573) || se.HasErrorCode(238) || se.HasErrorCode(115))
}

// tokenUnusable reports a resume token the server will never resume from:
// ChangeStreamHistoryLost 286 (the oplog rolled past it), InvalidResumeToken
// 260, ChangeStreamFatalError 280, or NonResumableChangeStreamError.
func tokenUnusable(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && (se.HasErrorLabel("NonResumableChangeStreamError") ||
		se.HasErrorCode(286) || se.HasErrorCode(260) || se.HasErrorCode(280))
}

// WakeupSource tells the claim loop that work may have arrived, sooner than
// the next poll, which stays on: a missed event costs one poll period at most.
type WakeupSource interface {
	// Run calls wake whenever work may have arrived, until ctx ends.
	Run(ctx context.Context, wake func()) error
}

// signal is a wake-up that coalesces: sends before the receiver looks count as one.
type signal chan struct{}

func newSignal() signal { return make(signal, 1) }

func (s signal) notify() {
	select {
	case s <- struct{}{}:
	default:
	}
}
