package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/scorerefresh/scorerefresh/internal/app"
	"github.com/scorerefresh/scorerefresh/internal/config"
	"github.com/scorerefresh/scorerefresh/metrics"
)

// The two consumers every scenario compares.
const (
	consumerReference    = "reference"
	consumerScorerefresh = "scorerefresh"
)

// running is a consumer being measured.
type running interface {
	// progress is the entries done so far: acknowledged for scorerefresh;
	// for the reference, entries whose user's refresh completed (it
	// acknowledges only at the end of each 200-entry batch, which would make
	// a short measurement of it jump in steps of a minute).
	progress() float64
	acked() float64
	refreshes() float64
	// commands counts MongoDB commands by name, from the command monitor
	// (scorerefresh_mongo_commands_total).
	commands() map[string]float64
	// timing is the refreshes' and claim rounds' counts and total seconds.
	timing() timing
	stop() error
}

// timing explains a rate: refresh slots busy (Little's law: refreshes ×
// mean duration / seconds) and what claim rounds cost.
type timing struct {
	Refreshes, RefreshSeconds, Claims, ClaimSeconds float64
	// CommandCount and CommandSeconds are per command name, as the
	// driver's monitor timed them (RTT + server + waiting).
	CommandCount, CommandSeconds map[string]float64
}

// serviceConfig is the configuration scorerefresh (and the reference's
// client) gets: the bench's environment, as in production, with the
// connection, database, rules and concurrency the scenario decides.
func (b *Bench) serviceConfig(db string, concurrency int) (config.Config, error) {
	environ := append(b.environ[:len(b.environ):len(b.environ)],
		"MONGODB_URI="+b.srv.uriVia(b.proxy.Addr()),
		"MONGODB_DATABASE="+db,
		"SCORING_RULES="+b.rulesPath,
		"METRICS_ADDR=127.0.0.1:0",
		"LOG_LEVEL=warn",
		fmt.Sprintf("REFRESH_CONCURRENCY=%d", concurrency),
	)
	return config.Parse(environ)
}

// withEnv runs f with extra variables in the service's environment.
func (b *Bench) withEnv(vars []string, f func() error) error {
	saved := b.environ
	b.environ = append(b.environ[:len(b.environ):len(b.environ)], vars...)
	defer func() { b.environ = saved }()
	return f()
}

// scorerefresh is one or more in-process instances of the service, wired by
// app.New exactly as `scorerefresh run` wires it, each with its own client,
// pool and registry: separate consumers that share only the queue.
type scorerefresh struct {
	svcs   []*app.Service
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

func (b *Bench) startScorerefresh(ctx context.Context, db string, instances, concurrency int, tune func(int, *app.Options)) (*scorerefresh, error) {
	cfg, err := b.serviceConfig(db, concurrency)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	s := &scorerefresh{cancel: cancel}
	for i := range instances {
		opts := app.Options{Logger: b.svcLog, Version: "bench"}
		if tune != nil {
			tune(i, &opts)
		}
		svc, err := app.New(ctx, cfg, opts)
		if err != nil {
			_ = s.stop()
			return nil, err
		}
		s.svcs = append(s.svcs, svc)
	}
	for _, svc := range s.svcs {
		s.wg.Go(func() {
			if err := svc.Run(runCtx); err != nil {
				s.mu.Lock()
				s.errs = append(s.errs, err)
				s.mu.Unlock()
			}
		})
	}
	return s, nil
}

func (s *scorerefresh) sum(f func(*app.Service) float64) float64 {
	t := 0.0
	for _, svc := range s.svcs {
		t += f(svc)
	}
	return t
}

func (s *scorerefresh) progress() float64 { return s.acked() }
func (s *scorerefresh) acked() float64 {
	return s.sum(func(svc *app.Service) float64 { return metrics.Read(svc.Metrics.EntriesAcked) })
}
func (s *scorerefresh) refreshes() float64 {
	return s.sum(func(svc *app.Service) float64 {
		return metrics.Read(svc.Metrics.Refreshes.WithLabelValues(metrics.OutcomeOK))
	})
}
func (s *scorerefresh) commands() map[string]float64 {
	out := map[string]float64{}
	for _, svc := range s.svcs {
		addCommands(out, svc.Registry)
	}
	return out
}

func (s *scorerefresh) timing() timing {
	t := timing{CommandCount: map[string]float64{}, CommandSeconds: map[string]float64{}}
	for _, svc := range s.svcs {
		addCommandTimes(t.CommandCount, t.CommandSeconds, svc.Registry)
		n, sum := histogram(svc.Metrics.RefreshDuration)
		t.Refreshes += n
		t.RefreshSeconds += sum
		n, sum = histogram(svc.Metrics.ClaimDuration)
		t.Claims += n
		t.ClaimSeconds += sum
	}
	return t
}

// deadLetteredAnyReason counts the entries dead-lettered for too many
// attempts or as malformed.
func (s *scorerefresh) deadLetteredAnyReason() float64 {
	return s.sum(func(svc *app.Service) float64 {
		return metrics.Read(svc.Metrics.EntriesDeadLettered.WithLabelValues(metrics.ReasonMaxAttempts)) +
			metrics.Read(svc.Metrics.EntriesDeadLettered.WithLabelValues(metrics.ReasonMalformed))
	})
}

func histogram(m prometheus.Metric) (count, sum float64) {
	var d dto.Metric
	if err := m.Write(&d); err != nil || d.Histogram == nil {
		return 0, 0
	}
	return float64(d.Histogram.GetSampleCount()), d.Histogram.GetSampleSum()
}

func (s *scorerefresh) stop() error {
	s.cancel()
	s.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, svc := range s.svcs {
		_ = svc.Close(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}

// referenceRun is the reference consumer on a client of its own, configured
// and monitored exactly as scorerefresh's (app.ClientOptions).
type referenceRun struct {
	ref    *reference
	client *mongo.Client
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}
}

func (b *Bench) startReference(ctx context.Context, db string) (*referenceRun, error) {
	cfg, err := b.serviceConfig(db, 1)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	client, err := mongo.Connect(app.ClientOptions(cfg, metrics.NewMongo(reg)))
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	r := &referenceRun{
		ref:    newReference(client.Database(db), b.rules, cfg.QueueCollection, cfg.PollInterval, b.svcLog),
		client: client, reg: reg, cancel: cancel, done: make(chan struct{}),
	}
	go func() { defer close(r.done); r.ref.drain(runCtx) }()
	return r, nil
}

func (r *referenceRun) progress() float64  { return float64(r.ref.covered.Load()) }
func (r *referenceRun) acked() float64     { return float64(r.ref.acked.Load()) }
func (r *referenceRun) refreshes() float64 { return float64(r.ref.refreshes.Load()) }
func (r *referenceRun) commands() map[string]float64 {
	out := map[string]float64{}
	addCommands(out, r.reg)
	return out
}

func (r *referenceRun) timing() timing {
	t := timing{Refreshes: float64(r.ref.refreshes.Load()), RefreshSeconds: time.Duration(r.ref.refreshNanos.Load()).Seconds(),
		CommandCount: map[string]float64{}, CommandSeconds: map[string]float64{}}
	addCommandTimes(t.CommandCount, t.CommandSeconds, r.reg)
	return t
}

func (r *referenceRun) stop() error {
	r.cancel()
	<-r.done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.client.Disconnect(ctx)
}

// addCommandTimes adds the count and total seconds of
// scorerefresh_mongo_command_duration_seconds of reg, by command.
func addCommandTimes(count, secs map[string]float64, reg prometheus.Gatherer) {
	eachCommand(reg, "scorerefresh_mongo_command_duration_seconds", func(command string, m *dto.Metric) {
		count[command] += float64(m.GetHistogram().GetSampleCount())
		secs[command] += m.GetHistogram().GetSampleSum()
	})
}

// addCommands adds scorerefresh_mongo_commands_total of reg, by command.
func addCommands(out map[string]float64, reg prometheus.Gatherer) {
	eachCommand(reg, "scorerefresh_mongo_commands_total", func(command string, m *dto.Metric) {
		out[command] += m.GetCounter().GetValue()
	})
}

// eachCommand calls f with every series of reg's metric name and its
// command label.
func eachCommand(reg prometheus.Gatherer, name string, f func(command string, m *dto.Metric)) {
	mfs, err := reg.Gather()
	if err != nil {
		return
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "command" {
					f(l.GetValue(), m)
				}
			}
		}
	}
}

func total(m map[string]float64) float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}
