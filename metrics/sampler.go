package metrics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/pkg/clock"
)

// SamplerConfig configures the SLI sampler.
type SamplerConfig struct {
	Queue, DeadLetter *mongo.Collection
	Interval          time.Duration // SLI_INTERVAL; default 15s
	Timeout           time.Duration // deadline of one sample; default Interval
	SummaryEvery      time.Duration // period of the info summary log line; default 1m
	Clock             clock.Clock   // paces the samples and dates them; default the wall clock
}

// Sampler samples queue depth, oldest pending age and dead-letter depth every
// interval, independently of the consumer's loops (a sampler that stopped
// with them would hide the very stall it exists to show), and derives the
// headroom gauges.
//
// Each sample costs four round trips whatever the queue's size:
//
//	depth             estimatedDocumentCount: collection metadata, O(1). Exact on
//	                  a replica set after a clean shutdown; after an unclean one it
//	                  can drift until the next validate, and on a sharded cluster
//	                  it counts orphans during migrations — an error of a few
//	                  entries, where an exact countDocuments would scan 64k index
//	                  keys every 15s exactly when the queue is in trouble.
//	oldest            find {createdAt: {$type: date}} sort {createdAt, _id} limit 1,
//	                  and find {createdAt: null} sort {_id} limit 1 (entries dated
//	                  by their ObjectId, hinted): both read the first key or two
//	                  of the index {createdAt, _id, username} the claim window
//	                  uses, and at most two documents (docs/query-plans.md).
//	dead letters      estimatedDocumentCount, as for depth.
type Sampler struct {
	cfg      SamplerConfig
	sli      *SLI
	consumer *Consumer
	log      *slog.Logger
	headroom HeadroomEstimator

	lastSummary time.Time
	summaryBase HeadroomSample
}

// NewSampler builds a sampler writing to sli; consumer supplies this
// replica's counters for the headroom estimate.
func NewSampler(cfg SamplerConfig, sli *SLI, consumer *Consumer, log *slog.Logger) *Sampler {
	cfg.Interval = cmp.Or(cfg.Interval, 15*time.Second)
	cfg.Timeout = cmp.Or(cfg.Timeout, cfg.Interval)
	cfg.SummaryEvery = cmp.Or(cfg.SummaryEvery, time.Minute)
	cfg.Clock = clock.Or(cfg.Clock)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sampler{cfg: cfg, sli: sli, consumer: consumer, log: log}
}

// Run samples until ctx ends. A failed sample is counted and logged; the
// gauges keep their last values (and the oldest age keeps rising).
func (s *Sampler) Run(ctx context.Context) {
	s.sample(ctx)
	clock.Every(ctx, s.cfg.Clock, s.cfg.Interval, s.sample)
}

func (s *Sampler) sample(ctx context.Context) {
	if err := s.RunOnce(ctx); err != nil && ctx.Err() == nil {
		s.sli.SampleErrors.Inc()
		s.log.Warn("SLI sample failed", "op", "sli sample", "err", err)
	}
}

// RunOnce takes one sample.
func (s *Sampler) RunOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	depth, err := s.cfg.Queue.EstimatedDocumentCount(ctx)
	if err != nil {
		return fmt.Errorf("counting queue entries: %w", err)
	}
	oldest, err := s.oldest(ctx)
	if err != nil {
		return err
	}
	dead, err := s.cfg.DeadLetter.EstimatedDocumentCount(ctx)
	if err != nil {
		return fmt.Errorf("counting dead letters: %w", err)
	}
	now := s.cfg.Clock.Now()
	s.sli.QueueDepth.Set(float64(depth))
	s.sli.SetOldest(oldest)
	s.sli.DeadLetterDepth.Set(float64(dead))
	s.sli.LastSample.Set(float64(now.UnixNano()) / 1e9)

	sample := s.counters(now, float64(depth))
	h := s.headroom.Observe(sample)
	s.sli.ArrivalRate.Set(h.ArrivalRate)
	s.sli.DrainCapacity.Set(h.DrainCapacity)
	s.sli.TimeToDrain.Set(h.TimeToDrain)
	s.summary(sample, h)
	return nil
}

// oldest returns the createdAt of the oldest pending entry, zero if none.
func (s *Sampler) oldest(ctx context.Context) (time.Time, error) {
	var dated struct {
		CreatedAt time.Time `bson:"createdAt"`
	}
	err := s.cfg.Queue.FindOne(ctx,
		bson.D{{Key: "createdAt", Value: bson.D{{Key: "$type", Value: "date"}}}},
		options.FindOne().SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).
			SetProjection(bson.D{{Key: "createdAt", Value: 1}})).Decode(&dated)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return time.Time{}, fmt.Errorf("reading the oldest entry: %w", err)
	}
	oldest := dated.CreatedAt
	var undated struct {
		ID bson.RawValue `bson:"_id"`
	}
	// Hinted: the _id index returns this order too, and a planner that picks
	// it (it can win the trial while undated entries sit at the head) reads
	// the whole queue once they are gone, every sample, until it replans.
	undatedQuery := bson.D{{Key: "createdAt", Value: nil}}
	opts := options.FindOne().SetSort(bson.D{{Key: "_id", Value: 1}}).SetProjection(bson.D{{Key: "_id", Value: 1}})
	err = s.cfg.Queue.FindOne(ctx, undatedQuery, opts.SetHint(queueTimeIndex)).Decode(&undated)
	if isBadHint(err) { // the index is missing (its build failed): plan freely
		err = s.cfg.Queue.FindOne(ctx, undatedQuery, opts.SetHint(nil)).Decode(&undated)
	}
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return time.Time{}, fmt.Errorf("reading the oldest undated entry: %w", err)
	}
	if oid, ok := undated.ID.ObjectIDOK(); ok && (oldest.IsZero() || oid.Timestamp().Before(oldest)) {
		oldest = oid.Timestamp()
	}
	return oldest, nil
}

// queueTimeIndex is the queue's index on {createdAt, _id, username}, the
// claim window's, which the consumer builds.
var queueTimeIndex = bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}, {Key: "username", Value: 1}}

// isBadHint reports the server's answer to a hint naming no index (BadValue).
func isBadHint(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(2)
}

func (s *Sampler) counters(now time.Time, depth float64) HeadroomSample {
	c := s.consumer
	return HeadroomSample{
		At:          now,
		Depth:       depth,
		Removed:     Read(c.EntriesAcked) + Read(c.EntriesDeadLettered.WithLabelValues(ReasonMalformed)) + Read(c.EntriesDeadLettered.WithLabelValues(ReasonMaxAttempts)),
		Refreshes:   Read(c.RefreshDuration),
		RefreshSecs: histogramSum(c.RefreshDuration),
		OKRefreshes: Read(c.Refreshes.WithLabelValues(OutcomeOK)),
		Acked:       Read(c.EntriesAcked),
		Limit:       Read(c.ConcurrencyLimit),
	}
}

// summary logs the periodic info line operators read in the pod's logs.
func (s *Sampler) summary(cur HeadroomSample, h Headroom) {
	if s.lastSummary.IsZero() {
		s.lastSummary, s.summaryBase = cur.At, cur
		return
	}
	dt := cur.At.Sub(s.lastSummary).Seconds()
	if dt < s.cfg.SummaryEvery.Seconds() {
		return
	}
	base := s.summaryBase
	s.log.Info("summary",
		"entries_per_s", round1((cur.Acked-base.Acked)/dt),
		"users_per_s", round1((cur.OKRefreshes-base.OKRefreshes)/dt),
		"depth", cur.Depth,
		"oldest_age_s", round1(s.sli.OldestAge()),
		"arrival_per_s", round1(h.ArrivalRate),
		"capacity_per_s", round1(h.DrainCapacity),
		"concurrency_limit", cur.Limit)
	s.lastSummary, s.summaryBase = cur.At, cur
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }
