package consumer

import (
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
	// streamRetryAfter is how long after falling back to polling the
	// stream is tried again.
	streamRetryAfter = 5 * time.Minute
	// maxStreamFailures is the consecutive stream errors before falling
	// back.
	maxStreamFailures = 5
)

// changeStream is the part of *mongo.ChangeStream the source uses.
type changeStream interface {
	Next(ctx context.Context) bool
	Decode(v any) error
	ResumeToken() bson.Raw
	Err() error
	Close(ctx context.Context) error
}

// watchFunc opens a stream of queue inserts, resuming after token if set.
type watchFunc func(ctx context.Context, resumeAfter bson.Raw) (changeStream, error)

// ChangeStreamSource wakes the claim loop the moment a producer inserts into
// the queue, instead of up to POLL_INTERVAL later. It watches inserts only and
// projects each event down to its resume token: no documents cross the wire.
// It keeps the resume token and resumes after a transient error, and drops
// it when the stream was invalidated (the queue collection was dropped or
// renamed): a fresh stream watches the queue as it now is. When the
// server has no change streams (a standalone mongod, FerretDB) or the stream
// keeps failing, it says so in one log line, reports polling as the active
// source, and tries again streamRetryAfter later. It is only ever a hint: the
// consumer's poll stays on either way.
type ChangeStreamSource struct {
	clock   clock.Clock // what retries wait on
	watch   watchFunc
	metrics *metrics.Consumer
	log     *slog.Logger
	active  string // metrics.WakeupChangeStream or metrics.WakeupPoll; "" before the first attempt
}

// NewChangeStreamSource watches inserts into queue; its retries wait on clk
// (nil: the wall clock).
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
	return newChangeStreamSource(watch, clk, m, log)
}

func newChangeStreamSource(watch watchFunc, clk clock.Clock, m *metrics.Consumer, log *slog.Logger) *ChangeStreamSource {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ChangeStreamSource{clock: clock.Or(clk), watch: watch, metrics: m, log: log}
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
		switch {
		case unsupported(err):
			s.use(metrics.WakeupPoll, err)
			token = nil
			if !s.sleep(ctx, streamRetryAfter) {
				return nil
			}
			continue
		case invalidated:
			// A fresh stream, not startAfter: the driver does not hand us
			// the invalidate event's token when $match filtered the event
			// out, and the stream is only a hint, so the inserts between
			// the invalidation and the fresh stream are the poll's.
			s.log.Info("change stream invalidated (the queue collection was dropped or renamed); opening a fresh one", "op", "change stream", "err", err)
			token = nil
		case tokenUnusable(err):
			// The oplog rolled past our token, or the server refuses it:
			// start from now. Polling has been covering the gap all along.
			token = nil
		}
		if failures++; failures >= maxStreamFailures {
			s.use(metrics.WakeupPoll, err)
			failures = 0
			if !s.sleep(ctx, streamRetryAfter) {
				return nil
			}
			continue
		}
		s.log.Debug("change stream interrupted; resuming", "op", "change stream", "attempt", failures, "err", err)
		if !s.sleep(ctx, Backoff{Base: 100 * time.Millisecond, Max: 10 * time.Second}.Delay(failures)) {
			return nil
		}
	}
	return nil
}

// drain follows an open stream until it ends and closes it. It returns the
// token to resume from, whether the stream was invalidated, and its error.
func (s *ChangeStreamSource) drain(ctx context.Context, stream changeStream, token bson.Raw, failures *int, wake func()) (bson.Raw, bool, error) {
	s.use(metrics.WakeupChangeStream, nil)
	token, invalidated := s.follow(ctx, stream, token, failures, wake)
	err := stream.Err()
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), streamClose)
	_ = stream.Close(closeCtx)
	cancel()
	// The server ends a change stream without an error only when it
	// invalidates it (a drop or rename of the queue, or a drop of its
	// database), and our $match keeps the invalidate event itself from us:
	// the driver's token is then the last insert's, and resuming from it
	// meets the same invalidation again, for good.
	invalidated = invalidated || err == nil
	// Anything that might have arrived while the stream was down is caught
	// by resuming, or by the next poll.
	if ctx.Err() == nil {
		wake()
	}
	return token, invalidated, err
}

// follow wakes the claim loop for each event of stream until it ends, and
// returns the resume token to go on from and whether the stream delivered
// an invalidate event (a pipeline that lets it through).
func (s *ChangeStreamSource) follow(ctx context.Context, stream changeStream, token bson.Raw, failures *int, wake func()) (bson.Raw, bool) {
	for stream.Next(ctx) {
		var ev struct {
			OperationType string `bson:"operationType"`
		}
		if stream.Decode(&ev) == nil && ev.OperationType == "invalidate" {
			return nil, true
		}
		token = stream.ResumeToken()
		*failures = 0
		s.metrics.Wakeups.WithLabelValues(metrics.WakeupChangeStream).Inc()
		wake()
	}
	return token, false
}

// use records which source is active, logging only on a change: one line when
// falling back, one when the stream is back, never a line per retry.
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

func (s *ChangeStreamSource) sleep(ctx context.Context, d time.Duration) bool {
	return clock.Sleep(ctx, s.clock, d) == nil
}

// unsupported reports a server without change streams: standalone mongod
// (40573), FerretDB and others (NotImplemented 238, CommandNotSupported 115).
func unsupported(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && (se.HasErrorCode(40573) || se.HasErrorCode(238) || se.HasErrorCode(115))
}

// tokenUnusable reports a resume token the server will never resume from,
// so that keeping it would fail the same way on every try (codes from
// MongoDB's src/mongo/base/error_codes.yml): ChangeStreamHistoryLost 286
// (the oplog rolled past it), InvalidResumeToken 260 (among others, a
// resumeAfter from an invalidate event's token), ChangeStreamFatalError 280,
// and anything labelled NonResumableChangeStreamError.
func tokenUnusable(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && (se.HasErrorLabel("NonResumableChangeStreamError") ||
		se.HasErrorCode(286) || se.HasErrorCode(260) || se.HasErrorCode(280))
}
