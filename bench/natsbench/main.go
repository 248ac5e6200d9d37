// Command natsbench is the NATS core baseline for `make bench-compare`: one publisher
// and N subscribers on a nats-server, the same workload shape as `sidecar bench`, and
// one JSON line with the same field names. It lives in its own module so that nats.go
// never enters the sidecar's dependencies.
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"
)

type options struct {
	url         string
	subscribers int
	duration    time.Duration
	warmup      time.Duration
	rate        int
	payload     int
	serverPID   int
}

type result struct {
	System          string  `json:"system"`
	Submitted       uint64  `json:"submitted"`
	Delivered       uint64  `json:"delivered"`
	DeliveredPerSec float64 `json:"delivered_per_sec"`
	SubmitPerSec    float64 `json:"submit_per_sec"`
	P50us           int64   `json:"p50_us"`
	P99us           int64   `json:"p99_us"`
	P999us          int64   `json:"p999_us"`
	MaxUs           int64   `json:"max_us"`
	Dropped         int     `json:"dropped"`
	CPUSeconds      float64 `json:"cpu_seconds"`
	PeakRSSBytes    int64   `json:"peak_rss_bytes"`
	CPUusPerDeliv   float64 `json:"cpu_us_per_delivered"`
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", "nats://127.0.0.1:4222", "nats-server URL")
	flag.IntVar(&o.subscribers, "subscribers", 2, "subscriber connections")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "measured publishing time")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "publishing time before measuring")
	flag.IntVar(&o.rate, "rate", 0, "messages/s offered (0: as fast as the publisher goes)")
	flag.IntVar(&o.payload, "payload", 100, "payload bytes (>= 9: a send timestamp and a measured flag)")
	flag.IntVar(&o.serverPID, "server-pid", 0, "nats-server pid, to report its CPU and peak RSS")
	flag.Parse()
	if o.payload < 9 || o.subscribers < 1 || o.rate < 0 {
		fmt.Fprintln(os.Stderr, "natsbench: --payload must be >= 9, --subscribers >= 1, --rate >= 0")
		os.Exit(2)
	}
	r, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsbench:", err)
		os.Exit(1)
	}
	json.NewEncoder(os.Stdout).Encode(r)
}

type subscriber struct {
	mu        sync.Mutex
	hist      *hdrhistogram.Histogram
	delivered atomic.Uint64
	sub       *nats.Subscription
	conn      *nats.Conn
}

func run(o options) (*result, error) {
	var measuring atomic.Bool
	subs := make([]*subscriber, o.subscribers)
	for i := range subs {
		s := &subscriber{hist: hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)}
		nc, err := nats.Connect(o.url)
		if err != nil {
			return nil, err
		}
		s.conn = nc
		s.sub, err = nc.Subscribe("bench", func(m *nats.Msg) {
			if !measuring.Load() || len(m.Data) < 9 || m.Data[8] != 1 {
				return // warmup traffic, or after the window
			}
			sent := int64(binary.BigEndian.Uint64(m.Data))
			s.mu.Lock()
			s.hist.RecordValue(max(1, (time.Now().UnixNano()-sent)/1e3))
			s.mu.Unlock()
			s.delivered.Add(1)
		})
		if err != nil {
			return nil, err
		}
		s.sub.SetPendingLimits(-1, -1) // never drop on the client: measure the server
		nc.Flush()
		subs[i] = s
	}
	pub, err := nats.Connect(o.url)
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	cpu0, _ := procCPU(o.serverPID)

	publish(pub, o, o.warmup, 0)
	pub.Flush()
	measuring.Store(true)
	start := time.Now()
	submitted := publish(pub, o, o.duration, 1)
	pub.Flush()
	elapsed := time.Since(start)
	// Let in-flight messages land (bounded), then stop counting.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && total(subs) < submitted*uint64(len(subs)) {
		time.Sleep(10 * time.Millisecond)
	}
	drainElapsed := time.Since(start)
	measuring.Store(false)
	cpu1, rss := procCPU(o.serverPID)

	all := hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
	dropped := 0
	for _, s := range subs {
		s.mu.Lock()
		all.Merge(s.hist)
		s.mu.Unlock()
		d, _ := s.sub.Dropped()
		dropped += d
		s.conn.Close()
	}
	delivered := total(subs)
	r := &result{
		System: "nats-core", Submitted: submitted, Delivered: delivered,
		DeliveredPerSec: float64(delivered) / drainElapsed.Seconds(),
		SubmitPerSec:    float64(submitted) / elapsed.Seconds(),
		P50us:           all.ValueAtQuantile(50), P99us: all.ValueAtQuantile(99),
		P999us: all.ValueAtQuantile(99.9), MaxUs: all.Max(), Dropped: dropped,
		CPUSeconds: cpu1 - cpu0, PeakRSSBytes: rss,
	}
	if delivered > 0 {
		r.CPUusPerDeliv = r.CPUSeconds * 1e6 / float64(delivered)
	}
	return r, nil
}

func total(subs []*subscriber) uint64 {
	var n uint64
	for _, s := range subs {
		n += s.delivered.Load()
	}
	return n
}

// publish sends for d, paced to o.rate in 1 ms steps (open loop), and returns the count.
// Byte 8 of each payload is the measured flag: warmup messages carry 0.
func publish(nc *nats.Conn, o options, d time.Duration, measured byte) uint64 {
	buf := make([]byte, o.payload)
	buf[8] = measured
	var sent uint64
	start := time.Now()
	end := start.Add(d)
	for now := start; now.Before(end); now = time.Now() {
		target := uint64(o.rate) * uint64(now.Sub(start)) / uint64(time.Second)
		if o.rate == 0 {
			target = sent + 1000
		}
		for ; sent < target; sent++ {
			binary.BigEndian.PutUint64(buf, uint64(time.Now().UnixNano()))
			if err := nc.Publish("bench", buf); err != nil {
				return sent
			}
		}
		if o.rate > 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return sent
}

// procCPU reads a process's user+system CPU seconds and peak RSS from /proc.
func procCPU(pid int) (float64, int64) {
	if pid <= 0 {
		return 0, 0
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	var rss int64
	if status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				rss = kb << 10
			}
		}
	}
	return (ut + st) / 100, rss // USER_HZ is 100 on Linux
}
