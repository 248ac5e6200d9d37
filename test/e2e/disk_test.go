package e2e

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Disk faults with real processes: a --data-dir on a small tmpfs that fills up while
// the node runs, one that is full when the node starts, and a corrupted sstable.

// diskTmpfsBytes is the size of the test's file system: above the default floor of
// --data-dir-min-free-bytes (64 MiB), so that the node starts with room.
const diskTmpfsBytes = 96 << 20

// diskMinFree is --data-dir-min-free-bytes's default.
const diskMinFree = 64 << 20

// diskTimeout bounds each wait of these tests (a failed commit is retried every
// second); generous for a loaded machine.
const diskTimeout = 30 * time.Second

// mountTmpfs mounts a tmpfs of size bytes on a new directory, unmounted with the test.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("mount -t tmpfs on %s: %v: %s (these tests need root, or CAP_SYS_ADMIN)", dir, err, out)
	}
	// Registered after t.TempDir's removal, so it runs before it.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fillDisk writes a file in dir until its file system has at most leave bytes free
// (0: until it answers ENOSPC), and returns the file's path: removing it makes room
// again. name tells the files of one test apart.
func fillDisk(t *testing.T, dir, name string, leave uint64) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for free := freeBytes(t, dir); leave == 0 || free > leave; free = freeBytes(t, dir) {
		n := len(buf)
		if leave > 0 {
			n = int(min(uint64(n), free-leave))
		}
		if _, err := f.Write(buf[:n]); err != nil {
			if leave > 0 || !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	must(t, f.Sync())
	t.Logf("disk filled by %s: %d bytes free on %s", name, freeBytes(t, dir), dir)
	return path
}

// freeBytes is statfs's free space of dir's file system.
func freeBytes(t *testing.T, dir string) uint64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Bavail * uint64(st.Bsize)
}

// submitEvents submits events through node n with ack QUEUED (durable on n's disk)
// and returns the error, if any; accepted events go to l.
func submitEvents(c *cluster, n int, events []*fanoutv1.Event, l *ledger) error {
	resp, err := sendSubmit(c.client(n), &fanoutv1.SubmitRequest{Events: events, Ack: fanoutv1.AckPolicy_ACK_POLICY_QUEUED})
	if err != nil {
		return err
	}
	return l.observe(c.node(n).spec.ID, events, resp)
}

// wantDiskFull waits until node n says why it is not ready (GetStatus and the health
// service) and refuses a Submit with UNAVAILABLE naming the full disk.
func wantDiskFull(t *testing.T, c *cluster, n int, probe []*fanoutv1.Event) {
	t.Helper()
	a := c.node(n)
	eventually(t, diskTimeout, "Submit answers UNAVAILABLE: disk full", func() error {
		err := submitEvents(c, n, probe, newLedger())
		if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "disk full") {
			return fmt.Errorf("Submit: %v", err)
		}
		return nil
	})
	eventually(t, diskTimeout, "not ready: disk full", func() error {
		ready, reason, err := a.readiness()
		if err != nil || ready || !strings.HasPrefix(reason, "disk full: ") {
			return fmt.Errorf("GetStatus ready=%v reason=%q err=%v", ready, reason, err)
		}
		if s, err := a.healthOf(readinessService); err != nil || s.String() != "NOT_SERVING" {
			return fmt.Errorf("health %s: %v %v", readinessService, s, err)
		}
		return nil
	})
	if full, err := a.metric("fanout_data_dir_disk_full"); err != nil || full != 1 {
		t.Errorf("fanout_data_dir_disk_full = %v (%v), want 1", full, err)
	}
	if n, err := a.metric("fanout_data_dir_failures_total", `kind="disk_full"`); err != nil || n == 0 {
		t.Errorf(`fanout_data_dir_failures_total{kind="disk_full"} = %v (%v), want > 0`, n, err)
	}
	_, reason, _ := a.readiness()
	t.Logf("node %s while the disk is full: not ready, %q", a.spec.ID, reason)
}

// wantRecovered waits until node n is ready again and takes Submits.
func wantRecovered(t *testing.T, c *cluster, n int) {
	t.Helper()
	a := c.node(n)
	eventually(t, diskTimeout, "ready again once there is room", func() error {
		ready, reason, err := a.readiness()
		if err != nil || !ready {
			return fmt.Errorf("GetStatus ready=%v reason=%q err=%v", ready, reason, err)
		}
		return nil
	})
	a.waitServing(readinessService)
	if full, err := a.metric("fanout_data_dir_disk_full"); err != nil || full != 0 {
		t.Errorf("fanout_data_dir_disk_full = %v (%v) after recovery, want 0", full, err)
	}
}

// wantAllOnDisk checks that node n's data dir holds the winner of every task of l,
// the node's own and its peers': it stops every other node (memory only), kills n
// with kill -9 and starts it again alone, so that what it holds is what it read from
// its disk; then it starts the others again, which bootstrap from it.
func wantAllOnDisk(t *testing.T, c *cluster, n int, l *ledger) {
	t.Helper()
	a := c.node(n)
	for i, o := range c.nodes {
		if i != n {
			o.kill()
		}
	}
	a.kill()
	a.launch()
	a.waitServing("") // live; not ready: its peers are down
	winner, _ := l.snapshot()
	ids := slices.Sorted(maps.Keys(winner))
	got, err := getIDs(a, ids)
	must(t, err)
	if err := diffState(a.spec.ID, got, winner, false); err != nil {
		t.Errorf("node %s restarted alone after kill -9, from its data dir: %v", a.spec.ID, err)
	}
	t.Logf("node %s restarted alone after kill -9: its data dir held %d of the %d acknowledged tasks", a.spec.ID, len(got), len(ids))
	for i, o := range c.nodes {
		if i != n {
			o.restart()
		}
	}
	a.waitReady()
}

// diskLoad submits batches of new task_ids (1 KiB each) through node n with ack
// QUEUED, one request every 5ms, until stop; the accepted ones go to l. A Submit
// refused with UNAVAILABLE (the disk is full) is counted: its events may still be
// applied in memory, and they are task_ids of their own, so they hide nothing.
// stop returns the accepted and refused requests, and fails the test on any other
// error.
func diskLoad(t *testing.T, c *cluster, n int, prefix string, l *ledger) (stop func() (ok, refused int)) {
	t.Helper()
	cli, id := c.client(n), c.node(n).spec.ID
	done := make(chan struct{})
	type result struct {
		ok, refused int
		err         error
	}
	res := make(chan result, 1)
	go func() {
		var r result
		defer func() { res <- r }()
		payload := strings.Repeat("d", 1<<10)
		for seq := 0; ; seq++ {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var events []*fanoutv1.Event
			for k := range 20 {
				events = append(events, &fanoutv1.Event{TaskId: fmt.Sprintf("%s%06d/%02d", prefix, seq, k), Payload: []byte(payload)})
			}
			resp, err := sendSubmit(cli, &fanoutv1.SubmitRequest{Events: events, Ack: fanoutv1.AckPolicy_ACK_POLICY_QUEUED})
			switch {
			case status.Code(err) == codes.Unavailable:
				r.refused++
			case err != nil:
				r.err = err
				return
			default:
				if r.err = l.observe(id, events, resp); r.err != nil {
					return
				}
				r.ok++
			}
		}
	}()
	return func() (int, int) {
		t.Helper()
		close(done)
		r := <-res
		if r.err != nil {
			t.Fatalf("disk load on %s: %v", id, r.err)
		}
		return r.ok, r.refused
	}
}

// TestDiskFullAtRunTime: node A's data dir fills up (a tmpfs written to ENOSPC)
// while A takes writes. A does not crash: Submit answers UNAVAILABLE with the
// reason, A is not ready ("disk full: …") but answers GetStatus, serves Get and
// applies B's events in memory; once the filler is removed it is ready again by
// itself, and after a kill -9 its data dir holds every acknowledged event, B's
// included.
func TestDiskFullAtRunTime(t *testing.T) {
	disk := mountTmpfs(t, diskTmpfsBytes)
	ss := specs(2, durableFlags...)
	ss[0].Flags = append(ss[0].Flags, "--data-dir="+filepath.Join(disk, "a"))
	c := startCluster(t, ss...)
	cv := watch(t, c)
	l := newLedger()
	for _, events := range changes("disk/before/", "v1", 200, 50) {
		must(t, submitEvents(c, 0, events, l))
	}
	// Room for 4 MiB above the floor (64 MiB): A's own writes cross it.
	filler := fillDisk(t, disk, "filler", diskMinFree+4<<20)
	stopLoad := diskLoad(t, c, 0, "disk/load/", l)
	wantDiskFull(t, c, 0, changes("disk/refused/", "v1", 1, 1)[0])
	// Then another writer takes the rest, to ENOSPC, while A's load goes on.
	filler2 := fillDisk(t, disk, "filler2", 0)
	// Reads are served, and B's writes are applied in memory.
	got, err := getIDs(c.node(0), []string{"disk/before/00000", "disk/before/00199"})
	if err != nil || len(got) != 2 {
		t.Errorf("Get on A while its disk is full: %d of 2 (%v)", len(got), err)
	}
	for _, events := range changes("disk/fromB/", "v1", 200, 50) {
		must(t, submitEvents(c, 1, events, l))
	}
	if !c.node(0).running() {
		t.Fatalf("A exited on a full disk:\n%s", c.node(0).logTail())
	}

	must(t, os.Remove(filler))
	must(t, os.Remove(filler2))
	wantRecovered(t, c, 0)
	for _, events := range changes("disk/after/", "v1", 200, 50) {
		must(t, submitEvents(c, 0, events, l))
	}
	io, err := c.node(0).metric("fanout_data_dir_failures_total", `kind="io"`)
	must(t, err)
	ok, refused := stopLoad()
	if refused == 0 {
		t.Errorf("the load on A had no Submit refused while the disk was full (%d accepted)", ok)
	}
	cv.wait(convergeTimeout, l, 0, 1)
	_, tasks := l.count()
	t.Logf("RESULT disk full at run time: the load's Submits to A: %d accepted, %d refused (UNAVAILABLE) while full; %v commits failed in pebble (io); A recovered once there was room; %d tasks converged", ok, refused, io, tasks)
	wantAllOnDisk(t, c, 0, l)
	cv.open(0, subOpts{snapshot: true})
	cv.open(1, subOpts{snapshot: true})
	cv.wait(convergeTimeout, l, 0, 1)
}

// TestDiskFullAtStart: node A restarts on a data dir whose disk is full. It starts
// (its store read-only), answers GetStatus and health (not ready, "disk full: …"),
// serves what it loaded, refuses Submit with UNAVAILABLE, and recovers by itself
// once there is room.
func TestDiskFullAtStart(t *testing.T) {
	disk := mountTmpfs(t, diskTmpfsBytes)
	ss := specs(2, durableFlags...)
	ss[0].Flags = append(ss[0].Flags, "--data-dir="+filepath.Join(disk, "a"))
	c := startCluster(t, ss...)
	l := newLedger()
	for _, events := range changes("diskstart/before/", "v1", 200, 50) {
		must(t, submitEvents(c, 0, events, l))
	}
	a := c.node(0)
	if code := a.stop(); code != 0 {
		t.Fatalf("A exited with %d on SIGTERM", code)
	}
	filler := fillDisk(t, disk, "filler", 0)
	a.launch()
	a.waitServing("") // live
	wantDiskFull(t, c, 0, changes("diskstart/refused/", "v1", 1, 1)[0])
	got, err := getIDs(a, []string{"diskstart/before/00000", "diskstart/before/00199"})
	if err != nil || len(got) != 2 {
		t.Errorf("Get on A started on a full disk: %d of 2 (%v)", len(got), err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	wantRecovered(t, c, 0)
	for _, events := range changes("diskstart/after/", "v1", 200, 50) {
		must(t, submitEvents(c, 0, events, l))
	}
	cv := watch(t, c)
	cv.wait(convergeTimeout, l, 0, 1)
	wantAllOnDisk(t, c, 0, l)
	cv = watch(t, c)
	cv.wait(convergeTimeout, l, 0, 1)
}

// TestCorruptedTableAtStart: an sstable of A's data dir is corrupted while A is
// stopped. A's start fails with a clean error that names the file and the way out,
// a non-zero exit code, and no stack trace; with the data dir moved aside, A starts
// empty and re-syncs from B.
func TestCorruptedTableAtStart(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "a")
	ss := specs(2, durableFlags...)
	ss[0].Flags = append(ss[0].Flags, "--data-dir="+dataDir)
	c := startCluster(t, ss...)
	l := newLedger()
	// Over pebble's 4 MiB memtable, so that some records are in an sstable; 2 KiB
	// each, so that a page of the checker's Get stays under gRPC's 4 MiB.
	const requests, batch, size = 40, 64, 2 << 10
	payload := strings.Repeat("x", size)
	for i := range requests {
		var events []*fanoutv1.Event
		for k := range batch {
			id := fmt.Sprintf("corrupt/%02d/%02d", i, k)
			events = append(events, &fanoutv1.Event{TaskId: id, Payload: []byte(id + payload)})
		}
		must(t, submitEvents(c, 0, events, l))
	}
	a := c.node(0)
	if code := a.stop(); code != 0 {
		t.Fatalf("A exited with %d on SIGTERM", code)
	}
	ssts, _ := filepath.Glob(filepath.Join(dataDir, "*.sst"))
	if len(ssts) == 0 {
		t.Fatalf("no sstable in %s after %d MiB of events", dataDir, requests*batch*size>>20)
	}
	for _, p := range ssts {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i := len(b) / 4; i < len(b)/2; i++ {
			b[i] ^= 0x5a
		}
		must(t, os.WriteFile(p, b, 0o600))
	}

	before := len(a.log())
	a.launch()
	st, err := a.wait(readyTimeout)
	if err != nil {
		t.Fatalf("A on a corrupted sstable: %v", err)
	}
	a.closeConn()
	out := a.log()[before:]
	if st.ExitCode() == 0 || st.ExitCode() == 2 {
		t.Errorf("A on a corrupted sstable exited with %d, want a clean non-zero exit (1)", st.ExitCode())
	}
	for _, bad := range []string{"panic", "goroutine "} {
		if strings.Contains(out, bad) {
			t.Errorf("A's stderr has %q (a stack trace):\n%s", bad, out)
		}
	}
	named := false
	for _, p := range ssts {
		named = named || strings.Contains(out, filepath.Base(p))
	}
	if !named || !strings.Contains(out, "move the data dir aside") {
		t.Errorf("A's error does not name the sstable and the way out:\n%s", out)
	}
	t.Logf("RESULT corrupted sstable at start: exit %d, stderr:\n%s", st.ExitCode(), out)

	// The way out works: the data dir moved aside, A starts empty and re-syncs.
	must(t, os.Rename(dataDir, dataDir+".corrupt"))
	a.restart()
	cv := watch(t, c)
	cv.wait(convergeTimeout, l, 0, 1)
}

// TestDiskFullNoFloor: with the floor off (--data-dir-min-free-bytes=0) pebble itself
// meets ENOSPC, which it treats as fatal to its commit pipeline. A does not crash:
// the store turns it into a failed commit and reopens pebble once there is room.
func TestDiskFullNoFloor(t *testing.T) {
	disk := mountTmpfs(t, diskTmpfsBytes)
	ss := specs(2, durableFlags...)
	ss[0].Flags = append(ss[0].Flags, "--data-dir="+filepath.Join(disk, "a"), "--data-dir-min-free-bytes=0")
	c := startCluster(t, ss...)
	cv := watch(t, c)
	l := newLedger()
	stopLoad := diskLoad(t, c, 0, "nofloor/load/", l)
	filler := fillDisk(t, disk, "filler", 0)
	a := c.node(0)
	eventually(t, diskTimeout, "not ready: data dir failing", func() error {
		ready, reason, err := a.readiness()
		if err != nil || ready {
			return fmt.Errorf("GetStatus ready=%v reason=%q err=%v", ready, reason, err)
		}
		return nil
	})
	// Some retries on the full disk: each closes pebble and fails to open it again.
	eventually(t, diskTimeout, "3 failed commits", func() error {
		n, err := a.metric("fanout_data_dir_total", `kind="failures"`)
		if err == nil && n < 3 {
			err = fmt.Errorf("%v failed commits", n)
		}
		return err
	})
	_, reason, _ := a.readiness()
	t.Logf("A with no floor on a full disk: not ready, %q", reason)
	if !strings.HasPrefix(reason, "disk full: ") || !strings.Contains(reason, "no space left on device") {
		t.Errorf("A's reason %q: want \"disk full: …\" naming pebble's ENOSPC", reason)
	}
	if !a.running() {
		t.Fatalf("A exited on a full disk with no floor:\n%s", a.logTail())
	}
	must(t, os.Remove(filler))
	wantRecovered(t, c, 0)
	io, err := a.metric("fanout_data_dir_failures_total", `kind="io"`)
	must(t, err)
	if io < 1 {
		t.Errorf(`fanout_data_dir_failures_total{kind="io"} = %v: pebble never met ENOSPC, which this test is about`, io)
	}
	ok, refused := stopLoad()
	cv.wait(convergeTimeout, l, 0, 1)
	t.Logf("RESULT no floor: %d accepted, %d refused; %v commits failed in pebble (io)", ok, refused, io)
	wantAllOnDisk(t, c, 0, l)
}
