package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// The consumers' goroutines carry this pprof label (run.go starts them under
// it; every goroutine they start inherits it), so a CPU profile tells their
// CPU from the server's, which runs in this process too.
const (
	partLabel    = "bench_part"
	partConsumer = "consumer"
)

// withConsumerLabel runs f with the consumer's label on this goroutine.
func withConsumerLabel(ctx context.Context, f func()) {
	pprof.Do(ctx, pprof.Labels(partLabel, partConsumer), func(context.Context) { f() })
}

// cpuSplit is one run's CPU by part, over the window the bench watched the
// consumer (its first to last observation).
type cpuSplit struct {
	Seconds    float64 `json:"seconds"`
	Process    float64 `json:"process_cpu_seconds"`    // this process: FerretDB, proxy, consumer, producers
	PostgreSQL float64 `json:"postgresql_cpu_seconds"` // the PostgreSQL cluster's processes; 0 on SQLite
	// Shares of this process's CPU profile samples; -1 when no profile
	// could be taken (-cpuprofile holds the profiler).
	ConsumerShare float64 `json:"consumer_share"` // goroutines labelled as the consumer's: scorerefresh, its driver
	ProxyShare    float64 `json:"proxy_share"`    // pkg/faultproxy, unlabelled
	Samples       int     `json:"profile_samples"`
}

// perEntry is CPU milliseconds per entry of each part: the consumer, the
// proxy, the server in this process (the rest of it: FerretDB, the runtime's
// background work, the bench's producer and sampler), PostgreSQL.
type perEntry struct {
	Process    float64 `json:"process_ms"`
	Consumer   float64 `json:"consumer_ms"`
	Proxy      float64 `json:"proxy_ms"`
	Server     float64 `json:"server_in_process_ms"`
	PostgreSQL float64 `json:"postgresql_ms"`
	// ServerTotal is what MongoDB's side costs: the server in this process
	// plus PostgreSQL.
	ServerTotal float64 `json:"server_total_ms"`
}

func (c cpuSplit) perEntry(entries float64) perEntry {
	if entries <= 0 {
		return perEntry{}
	}
	ms := func(s float64) float64 { return 1000 * s / entries }
	p := perEntry{Process: ms(c.Process), PostgreSQL: ms(c.PostgreSQL)}
	if c.ConsumerShare >= 0 {
		p.Consumer = ms(c.Process * c.ConsumerShare)
		p.Proxy = ms(c.Process * c.ProxyShare)
		p.Server = ms(c.Process * (1 - c.ConsumerShare - c.ProxyShare))
	} else {
		p.Server = p.Process // not split: an upper bound
	}
	p.ServerTotal = p.Server + p.PostgreSQL
	return p
}

// cpuWatch measures a cpuSplit: call tick from the run's observer, stop after
// the run.
type cpuWatch struct {
	pgPID        int
	profiling    bool
	prof         bytes.Buffer
	t0, t1       time.Time
	self0, self1 float64
	pg0, pg1     float64
	pgAt0, pgAt1 time.Time
	started      bool
}

// pgEvery is how often tick reads PostgreSQL's CPU: a reading scans /proc,
// which costs this process more than the rest of a tick.
const pgEvery = time.Second

func newCPUWatch(pgPID int) *cpuWatch { return &cpuWatch{pgPID: pgPID} }

// tick records the latest reading; the first one starts the window and the
// CPU profile.
func (w *cpuWatch) tick() {
	now, self := time.Now(), selfCPU()
	if !w.started {
		w.started = true
		w.t0, w.self0 = now, self
		w.pg0, w.pgAt0 = pgCPU(w.pgPID), now
		w.pg1, w.pgAt1 = w.pg0, now
		w.profiling = pprof.StartCPUProfile(&w.prof) == nil
	}
	w.t1, w.self1 = now, self
	if now.Sub(w.pgAt1) >= pgEvery {
		w.pg1, w.pgAt1 = pgCPU(w.pgPID), now
	}
}

// stop ends the profile and returns the split.
func (w *cpuWatch) stop() cpuSplit {
	s := cpuSplit{ConsumerShare: -1, ProxyShare: -1}
	if !w.started {
		return s
	}
	s.Seconds = w.t1.Sub(w.t0).Seconds()
	s.Process = w.self1 - w.self0
	// PostgreSQL is read once a second: scale its reading to the window.
	if d := w.pgAt1.Sub(w.pgAt0).Seconds(); d > 0 {
		s.PostgreSQL = (w.pg1 - w.pg0) * s.Seconds / d
	}
	if !w.profiling {
		return s
	}
	pprof.StopCPUProfile()
	shares, err := profileShares(&w.prof)
	if err == nil && shares.total > 0 {
		s.Samples = shares.samples
		s.ConsumerShare = shares.consumer / shares.total
		s.ProxyShare = shares.proxy / shares.total
	}
	return s
}

// pgCPU is the CPU seconds of PostgreSQL's processes so far: the postmaster
// (with the backends it has reaped) and its live children, which share its
// process group (the bench starts it with Setpgid). 0 without a PostgreSQL.
func pgCPU(leader int) float64 {
	if leader <= 0 {
		return 0
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	ticks := 0.0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, ok := procStatFields(pid)
		if !ok || f.pgrp != leader {
			continue
		}
		ticks += f.utime + f.stime
		if pid == leader {
			ticks += f.cutime + f.cstime
		}
	}
	return ticks / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

type procFields struct {
	pgrp                         int
	utime, stime, cutime, cstime float64
}

// procStatFields reads /proc/<pid>/stat. The command name (field 2) may hold
// spaces and parentheses, so fields are counted from its closing one.
func procStatFields(pid int) (procFields, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procFields{}, false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procFields{}, false
	}
	f := strings.Fields(string(data[i+1:])) // f[0] is field 3 (state)
	if len(f) < 15 {
		return procFields{}, false
	}
	num := func(k int) float64 { v, _ := strconv.ParseFloat(f[k-3], 64); return v }
	return procFields{pgrp: int(num(5)), utime: num(14), stime: num(15), cutime: num(16), cstime: num(17)}, true
}

// shares are CPU nanoseconds of a profile by part.
type shares struct {
	total, consumer, proxy float64
	samples                int
}

// profileShares reads a CPU profile as runtime/pprof writes it (gzipped
// profile.proto) and sums its CPU time by part: samples labelled as the
// consumer's, unlabelled samples with pkg/faultproxy on the stack, the rest.
// It decodes only the fields it needs, so the bench needs no profile library.
func profileShares(r io.Reader) (shares, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return shares{}, err
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		return shares{}, err
	}
	p, err := parseProfile(data)
	if err != nil {
		return shares{}, err
	}
	var s shares
	for _, smp := range p.samples {
		if len(smp.values) == 0 {
			continue
		}
		v := float64(smp.values[len(smp.values)-1]) // cpu nanoseconds
		s.total += v
		s.samples++
		switch {
		case p.str(smp.labels[partLabel]) == partConsumer:
			s.consumer += v
		case p.onStack(smp, "/pkg/faultproxy."):
			s.proxy += v
		}
	}
	return s, nil
}

// profile is what profileShares needs of profile.proto.
type profile struct {
	samples   []profSample
	locations map[uint64][]uint64 // location id -> function ids
	functions map[uint64]int64    // function id -> name (string index)
	strings   []string
}

type profSample struct {
	locations []uint64
	values    []int64
	labels    map[string]int64 // key -> string index of the value
}

func (p *profile) str(i int64) string {
	if i <= 0 || int(i) >= len(p.strings) {
		return ""
	}
	return p.strings[i]
}

func (p *profile) onStack(s profSample, part string) bool {
	for _, loc := range s.locations {
		for _, fn := range p.locations[loc] {
			if strings.Contains(p.str(p.functions[fn]), part) {
				return true
			}
		}
	}
	return false
}

// Field numbers of profile.proto.
const (
	fProfileSample   = 2
	fProfileLocation = 4
	fProfileFunction = 5
	fProfileString   = 6
	fSampleLocation  = 1
	fSampleValue     = 2
	fSampleLabel     = 3
	fLabelKey        = 1
	fLabelStr        = 2
	fLocationID      = 1
	fLocationLine    = 4
	fLineFunction    = 1
	fFunctionID      = 1
	fFunctionName    = 2
)

func parseProfile(data []byte) (*profile, error) {
	p := &profile{locations: map[uint64][]uint64{}, functions: map[uint64]int64{}}
	var labelKeys [][]int64 // per sample: label key indexes, resolved once strings are read
	err := eachField(data, func(num int, wire int, v uint64, b []byte) error {
		switch num {
		case fProfileSample:
			s, keys, err := parseSample(b)
			p.samples = append(p.samples, s)
			labelKeys = append(labelKeys, keys)
			return err
		case fProfileLocation:
			return parseLocation(b, p.locations)
		case fProfileFunction:
			var id uint64
			var name int64
			err := eachField(b, func(n, _ int, v uint64, _ []byte) error {
				switch n {
				case fFunctionID:
					id = v
				case fFunctionName:
					name = int64(v)
				}
				return nil
			})
			p.functions[id] = name
			return err
		case fProfileString:
			p.strings = append(p.strings, string(b))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Labels are stored as (key index, value index) pairs; key the map by
	// the key's string.
	for i := range p.samples {
		m := map[string]int64{}
		for j := 0; j+1 < len(labelKeys[i]); j += 2 {
			m[p.str(labelKeys[i][j])] = labelKeys[i][j+1]
		}
		p.samples[i].labels = m
	}
	return p, nil
}

func parseSample(b []byte) (profSample, []int64, error) {
	var s profSample
	var labels []int64
	err := eachField(b, func(num, wire int, v uint64, sub []byte) error {
		switch num {
		case fSampleLocation:
			return appendVarints(wire, v, sub, func(x uint64) { s.locations = append(s.locations, x) })
		case fSampleValue:
			return appendVarints(wire, v, sub, func(x uint64) { s.values = append(s.values, int64(x)) })
		case fSampleLabel:
			var key, str int64
			err := eachField(sub, func(n, _ int, v uint64, _ []byte) error {
				switch n {
				case fLabelKey:
					key = int64(v)
				case fLabelStr:
					str = int64(v)
				}
				return nil
			})
			labels = append(labels, key, str)
			return err
		}
		return nil
	})
	return s, labels, err
}

func parseLocation(b []byte, into map[uint64][]uint64) error {
	var id uint64
	var fns []uint64
	err := eachField(b, func(num, _ int, v uint64, sub []byte) error {
		switch num {
		case fLocationID:
			id = v
		case fLocationLine:
			return eachField(sub, func(n, _ int, v uint64, _ []byte) error {
				if n == fLineFunction {
					fns = append(fns, v)
				}
				return nil
			})
		}
		return nil
	})
	into[id] = fns
	return err
}

// appendVarints handles a repeated integer field either packed (one
// length-delimited run) or not (one varint per occurrence); runtime/pprof
// writes both.
func appendVarints(wire int, v uint64, packed []byte, add func(uint64)) error {
	if wire == wireVarint {
		add(v)
		return nil
	}
	for len(packed) > 0 {
		x, n := binary.Uvarint(packed)
		if n <= 0 {
			return errBadProfile
		}
		add(x)
		packed = packed[n:]
	}
	return nil
}

const (
	wireVarint = 0
	wire64     = 1
	wireBytes  = 2
	wire32     = 5
)

var errBadProfile = errors.New("malformed CPU profile")

// eachField calls f for each field of a protobuf message: varints in v,
// length-delimited fields in b.
func eachField(data []byte, f func(num, wire int, v uint64, b []byte) error) error {
	for len(data) > 0 {
		key, n := binary.Uvarint(data)
		if n <= 0 {
			return errBadProfile
		}
		data = data[n:]
		num, wire := int(key>>3), int(key&7)
		var v uint64
		var b []byte
		switch wire {
		case wireVarint:
			if v, n = binary.Uvarint(data); n <= 0 {
				return errBadProfile
			}
			data = data[n:]
		case wireBytes:
			l, n := binary.Uvarint(data)
			if n <= 0 || uint64(len(data)-n) < l {
				return errBadProfile
			}
			b, data = data[n:n+int(l)], data[n+int(l):]
		case wire64:
			if len(data) < 8 {
				return errBadProfile
			}
			data = data[8:]
		case wire32:
			if len(data) < 4 {
				return errBadProfile
			}
			data = data[4:]
		default:
			return errBadProfile
		}
		if err := f(num, wire, v, b); err != nil {
			return err
		}
	}
	return nil
}
