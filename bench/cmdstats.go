package bench

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
)

// Pipeline stages a command is attributed to, from the goroutine that
// issued it (the driver calls the monitor synchronously, on the calling
// goroutine). Function names, not command shapes, so the attribution is the
// same for every version of the consumer the bench measures.
const (
	stageClaim   = "claim"   // a claim round: window, leases, lease insert, takeover, absorb, malformed scan
	stageRefresh = "refresh" // the scorer: source queries, the OCC read and write
	stageStart   = "start"   // marking a refresh as running on its lease
	stageAck     = "ack"     // the ack flush: deletes, releases, backoffs, dead letters
	stageRenew   = "renew"   // lease renewal
	stageSampler = "sampler" // the SLI sampler
	stageOther   = "other"   // pings, index creation, change streams, clock sync
)

var stageFrames = []struct{ frame, stage string }{
	{"consumer.(*Consumer).claimOnce", stageClaim},
	{"consumer.(*Consumer).refreshOne", stageRefresh},
	{"consumer.(*startMarker)", stageStart},
	{"consumer.(*completer)", stageAck},
	{"consumer.(*Consumer).renewLoop", stageRenew},
	{"metrics.(*Sampler)", stageSampler},
}

// callerStage names the stage of the calling goroutine.
func callerStage() string {
	var pcs [96]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		for _, s := range stageFrames {
			if strings.Contains(f.Function, s.frame) {
				return s.stage
			}
		}
		if !more {
			return stageOther
		}
	}
}

// cmdCount is what some commands cost: how many, bytes each way, documents
// the server returned in cursor batches.
type cmdCount struct {
	Commands float64 `json:"commands"`
	Failed   float64 `json:"failed"`
	Sent     float64 `json:"bytes_sent"`
	Received float64 `json:"bytes_received"`
	Docs     float64 `json:"documents_returned"`
}

func (c *cmdCount) add(o cmdCount) {
	c.Commands += o.Commands
	c.Failed += o.Failed
	c.Sent += o.Sent
	c.Received += o.Received
	c.Docs += o.Docs
}

func (c cmdCount) minus(o cmdCount) cmdCount {
	return cmdCount{Commands: c.Commands - o.Commands, Failed: c.Failed - o.Failed, Sent: c.Sent - o.Sent, Received: c.Received - o.Received, Docs: c.Docs - o.Docs}
}

func (c cmdCount) scaled(f float64) cmdCount {
	return cmdCount{Commands: c.Commands * f, Failed: c.Failed * f, Sent: c.Sent * f, Received: c.Received * f, Docs: c.Docs * f}
}

// cmdSnapshot is a cmdStats at one moment (or several replicas' summed).
type cmdSnapshot struct {
	Stages map[string]cmdCount `json:"stages"`
	// LostInserts are lease inserts that hit a duplicate key: another
	// replica (or a backoff) had the user first.
	LostInserts float64 `json:"lost_lease_inserts"`
	// MaxCommand and MaxReply are the largest claim-round command and
	// reply; MaxRoundSent and MaxRoundReceived the most one claim round
	// sent and received in all its commands together.
	MaxCommand       int `json:"max_claim_command_bytes"`
	MaxReply         int `json:"max_claim_reply_bytes"`
	MaxRoundSent     int `json:"max_claim_round_bytes_sent"`
	MaxRoundReceived int `json:"max_claim_round_bytes_received"`
	// StartUpCommands are the commands sent before the first claim round
	// (index creation, the change-stream probe, the first samples and
	// pings; the claim loop's own probes count as its first round's):
	// what a replica costs once, whatever the backlog. A replica that has
	// not claimed yet counts all of its commands here.
	StartUpCommands float64 `json:"start_up_commands"`
}

func (s cmdSnapshot) total() cmdCount {
	var t cmdCount
	for _, c := range s.Stages {
		t.add(c)
	}
	return t
}

func (s cmdSnapshot) minus(o cmdSnapshot) cmdSnapshot {
	d := cmdSnapshot{Stages: map[string]cmdCount{}, LostInserts: s.LostInserts - o.LostInserts, StartUpCommands: s.StartUpCommands - o.StartUpCommands,
		MaxCommand: s.MaxCommand, MaxReply: s.MaxReply, MaxRoundSent: s.MaxRoundSent, MaxRoundReceived: s.MaxRoundReceived}
	for k, c := range s.Stages {
		d.Stages[k] = c.minus(o.Stages[k])
	}
	return d
}

func sumSnapshots(all []cmdSnapshot) cmdSnapshot {
	s := cmdSnapshot{Stages: map[string]cmdCount{}}
	for _, o := range all {
		for k, c := range o.Stages {
			t := s.Stages[k]
			t.add(c)
			s.Stages[k] = t
		}
		s.LostInserts += o.LostInserts
		s.StartUpCommands += o.StartUpCommands
		s.MaxCommand = max(s.MaxCommand, o.MaxCommand)
		s.MaxReply = max(s.MaxReply, o.MaxReply)
		s.MaxRoundSent = max(s.MaxRoundSent, o.MaxRoundSent)
		s.MaxRoundReceived = max(s.MaxRoundReceived, o.MaxRoundReceived)
	}
	return s
}

// cmdStats counts one replica's commands from its client's monitor.
type cmdStats struct {
	claims string // the claims collection: its inserts are lease inserts

	mu         sync.Mutex
	pending    map[int64]pendingCmd // by request ID, until the reply
	stages     map[string]*cmdCount
	lost       float64
	maxCommand int
	maxReply   int
	// The claim round in progress: a claim round's commands share the
	// deadline of the round's context, which is new every round.
	round                          time.Time
	roundSent, roundReceived       int
	maxRoundSent, maxRoundReceived int
	// startUp is the commands before the first claim round; claimed
	// says that round has begun.
	startUp float64
	claimed bool
}

type pendingCmd struct {
	stage       string
	leaseInsert bool
}

func newCmdStats(claims string) *cmdStats {
	return &cmdStats{claims: claims, pending: map[int64]pendingCmd{}, stages: map[string]*cmdCount{}}
}

// monitor is the event.CommandMonitor to hand the replica's client.
func (s *cmdStats) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{
		Started: func(ctx context.Context, e *event.CommandStartedEvent) {
			stage := callerStage()
			insert := false
			if e.CommandName == "insert" {
				coll, _ := e.Command.Lookup("insert").StringValueOK()
				insert = coll == s.claims
			}
			deadline, _ := ctx.Deadline()
			s.mu.Lock()
			defer s.mu.Unlock()
			s.pending[e.RequestID] = pendingCmd{stage: stage, leaseInsert: insert}
			if stage == stageClaim && !s.claimed {
				s.claimed, s.startUp = true, s.commands()
			}
			c := s.count(stage)
			c.Commands++
			c.Sent += float64(len(e.Command))
			if stage == stageClaim {
				if !deadline.Equal(s.round) {
					s.closeRound()
					s.round = deadline
				}
				s.roundSent += len(e.Command)
				s.maxCommand = max(s.maxCommand, len(e.Command))
			}
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
			docs := batchLen(e.Reply)
			lost := 0
			s.mu.Lock()
			p := s.pending[e.RequestID]
			s.mu.Unlock()
			if p.leaseInsert {
				lost = duplicateKeys(e.Reply)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			delete(s.pending, e.RequestID)
			c := s.count(p.stage)
			c.Received += float64(len(e.Reply))
			c.Docs += float64(docs)
			s.lost += float64(lost)
			if p.stage == stageClaim {
				s.roundReceived += len(e.Reply)
				s.maxReply = max(s.maxReply, len(e.Reply))
			}
		},
		Failed: func(_ context.Context, e *event.CommandFailedEvent) {
			s.mu.Lock()
			defer s.mu.Unlock()
			p := s.pending[e.RequestID]
			delete(s.pending, e.RequestID)
			s.count(p.stage).Failed++
		},
	}
}

func (s *cmdStats) count(stage string) *cmdCount {
	if stage == "" {
		stage = stageOther
	}
	c, ok := s.stages[stage]
	if !ok {
		c = &cmdCount{}
		s.stages[stage] = c
	}
	return c
}

// commands is every command counted so far; s.mu is held.
func (s *cmdStats) commands() float64 {
	var n float64
	for _, c := range s.stages {
		n += c.Commands
	}
	return n
}

func (s *cmdStats) closeRound() {
	s.maxRoundSent = max(s.maxRoundSent, s.roundSent)
	s.maxRoundReceived = max(s.maxRoundReceived, s.roundReceived)
	s.roundSent, s.roundReceived = 0, 0
}

func (s *cmdStats) snapshot() cmdSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := cmdSnapshot{Stages: map[string]cmdCount{}, LostInserts: s.lost, MaxCommand: s.maxCommand, MaxReply: s.maxReply,
		MaxRoundSent: max(s.maxRoundSent, s.roundSent), MaxRoundReceived: max(s.maxRoundReceived, s.roundReceived),
		StartUpCommands: s.startUp}
	if !s.claimed {
		out.StartUpCommands = s.commands()
	}
	for k, c := range s.stages {
		out.Stages[k] = *c
	}
	return out
}

// batchLen counts the documents of a cursor reply's first or next batch.
func batchLen(reply bson.Raw) int {
	for _, key := range []string{"firstBatch", "nextBatch"} {
		if arr, ok := reply.Lookup("cursor", key).ArrayOK(); ok {
			vals, err := arr.Values()
			if err != nil {
				return 0
			}
			return len(vals)
		}
	}
	return 0
}

// duplicateKeys counts the write errors with code 11000 in a write reply.
func duplicateKeys(reply bson.Raw) int {
	arr, ok := reply.Lookup("writeErrors").ArrayOK()
	if !ok {
		return 0
	}
	vals, err := arr.Values()
	if err != nil {
		return 0
	}
	n := 0
	for _, v := range vals {
		doc, ok := v.DocumentOK()
		if !ok {
			continue
		}
		if code, ok := doc.Lookup("code").AsInt64OK(); ok && code == 11000 {
			n++
		}
	}
	return n
}
