package bench

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuMeter measures how busy the machine and this process were over a run:
// the bench shares its cores with FerretDB (in this process), PostgreSQL
// (other processes) and anything else running, so a rate below its bound is
// read next to these.
type cpuMeter struct {
	start              time.Time
	busy, total, self0 float64
}

// cpuUse is a run's CPU, in cores (2 means both cores of this machine busy).
type cpuUse struct {
	Machine float64 `json:"machine_cores_busy"` // every process, from /proc/stat
	Process float64 `json:"process_cores"`      // this process: FerretDB, proxy, clients, consumers
}

func startCPU() cpuMeter {
	m := cpuMeter{start: time.Now()}
	m.busy, m.total = procStat()
	m.self0 = selfCPU()
	return m
}

func (m cpuMeter) stop() cpuUse {
	elapsed := time.Since(m.start).Seconds()
	if elapsed <= 0 {
		return cpuUse{}
	}
	busy, total := procStat()
	u := cpuUse{Process: (selfCPU() - m.self0) / elapsed}
	if total > m.total {
		u.Machine = (busy - m.busy) / (total - m.total) * float64(runtime.NumCPU())
	}
	return u
}

// procStat returns the busy and total jiffies of all CPUs ("cpu" line).
func procStat() (busy, total float64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0
	}
	for i, s := range f[1:] {
		v, _ := strconv.ParseFloat(s, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
