//go:build cgo

package dawnrt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/testkit"
)

// TestDeviceLoss makes Dawn lose the device (wgpuDeviceForceLoss at the "lose" site) while a
// dispatch is in flight: the dispatch fails with ErrDevice saying the device was lost, so does
// every later call, Close reports the loss, and the loss reaches the logger.
func TestDeviceLoss(t *testing.T) {
	var lose sync.Mutex
	armed := false
	logs := &testkit.LockedBuffer{}
	d, err := Open(Options{
		Faults: func(site string) error {
			lose.Lock()
			defer lose.Unlock()
			if site == "lose" && armed {
				return errors.New("test loss")
			}
			return nil
		},
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		testkit.SkipWithoutDawn(t, err)
	}
	a := newAffine(t, d, 64)
	out, err := a.run(context.Background(), a.groups())
	if err != nil {
		t.Fatal(err)
	}
	a.check(t, out)
	lose.Lock()
	armed = true
	lose.Unlock()
	for i := range 2 {
		_, err = a.run(context.Background(), a.groups())
		if !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), "device lost") || !strings.Contains(err.Error(), "test loss") {
			t.Errorf("call %d on the lost device: %v", i, err)
		}
		t.Logf("call %d: %v", i, err)
	}
	if !d.Lost() || !strings.Contains(d.LossMessage(), "test loss") {
		t.Errorf("Lost() = %v, LossMessage() = %q", d.Lost(), d.LossMessage())
	}
	if _, err := d.NewBuffer("after", 4, UsageStorage); !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), "device lost") {
		t.Errorf("NewBuffer on the lost device: %v", err)
	}
	if _, err := d.NewPipeline("after", affineWGSL); !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), "device lost") {
		t.Errorf("NewPipeline on the lost device: %v", err)
	}
	if err := d.Write("x", a.x, 0, make([]byte, 4)); !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), "device lost") {
		t.Errorf("Write on the lost device: %v", err)
	}
	if err := d.Sync(context.Background()); !errors.Is(err, ops.ErrDevice) {
		t.Errorf("Sync on the lost device: %v", err)
	}
	if err := d.Close(); !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), "lost") {
		t.Errorf("Close of a lost device: %v", err)
	}
	if d.Lost() {
		t.Error("Lost() after Close")
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	got := logs.String()
	if !strings.Contains(got, "device lost") || strings.Count(got, "msg=\"dawn: device lost\"") != 1 {
		t.Errorf("the logger did not hear of the loss once: %q", got)
	}
	t.Logf("log: %s", got)
}

// faultSwitch is an Options.Faults that fails one site, chosen by set.
type faultSwitch struct {
	mu   sync.Mutex
	site string
	err  error
	hits map[string]int
}

func (f *faultSwitch) hook(site string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hits == nil {
		f.hits = map[string]int{}
	}
	f.hits[site]++
	if site == f.site {
		return f.err
	}
	return nil
}

func (f *faultSwitch) set(site string) {
	f.mu.Lock()
	f.site = site
	f.mu.Unlock()
}

func (f *faultSwitch) count(site string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[site]
}

// TestFaults fails each site of Options.Faults in turn: the failure wraps the injected error
// and the sentinel of its kind and names the site; the device works on afterwards.
func TestFaults(t *testing.T) {
	boom := errors.New("boom")
	for _, site := range []string{"load", "open"} {
		f := &faultSwitch{site: site, err: boom}
		if d, err := Open(Options{Faults: f.hook}); err == nil {
			d.Close()
			t.Errorf("fault at %s: opened", site)
		} else if !errors.Is(err, boom) || !errors.Is(err, ops.ErrUnavailable) || !strings.Contains(err.Error(), site) {
			t.Errorf("fault at %s: %v", site, err)
		}
	}
	f := &faultSwitch{err: boom}
	d := openDevice(t, Options{Faults: f.hook})
	ctx := context.Background()
	a := newAffine(t, d, 64)
	live := liveCount(d) - executorBuffers(d)
	hostCall := func(s *Call, n int) { hostAffine(s, a.p, make([]float32, n)) }
	for _, tc := range []struct {
		site string
		call func() error
	}{
		{"create-buffer", func() error { _, err := d.NewBuffer("b", 4, UsageStorage); return err }},
		// The scratch of a call's host tensors is made on the device too.
		{"create-buffer", func() error { var s Call; hostCall(&s, 17); return d.Run(ctx, &s) }},
		{"write-buffer", func() error { return d.Write("x", a.x, 0, []byte{1, 2, 3, 4}) }},
		{"write-buffer", func() error { var s Call; hostCall(&s, 3); return d.Run(ctx, &s) }},
		{"pipeline", func() error { _, err := d.NewPipeline("test/fault", affineWGSL); return err }},
		{"submit", func() error { _, err := a.run(ctx, a.groups()); return err }},
		{"map", func() error { _, err := a.run(ctx, a.groups()); return err }},
		{"map", func() error { return d.Read(ctx, "y", a.y, 0, make([]byte, 8)) }},
	} {
		f.set(tc.site)
		before := f.count(tc.site)
		err := tc.call()
		f.set("")
		if f.count(tc.site) == before {
			t.Errorf("fault at %s: the site was not reached", tc.site)
		}
		if !errors.Is(err, boom) || !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), tc.site) {
			t.Errorf("fault at %s: %v", tc.site, err)
		}
		t.Logf("%s: %v", tc.site, err)
	}
	if n, x := liveCount(d), executorBuffers(d); n != live+x {
		t.Errorf("%d buffers alive after the faults, %d before and %d the executor's: a failed call left buffers behind", n, live, x)
	}

	// "async" fails a call after it was recorded: a call that does not wait returns nil, and
	// the next wait reports it, naming the call, once.
	var s Call
	a.call(&s, a.groups())
	f.set("async")
	err := d.Run(ctx, &s)
	f.set("")
	if err != nil {
		t.Fatalf("a call that does not wait, failing later: %v", err)
	}
	d.lock(ctx)
	seq := d.x.seq
	d.unlock()
	err = d.Sync(ctx)
	if !errors.Is(err, boom) || !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), fmt.Sprintf("dawn: affine (call %d): ", seq)) {
		t.Errorf("fault at async, reported by Sync: %v", err)
	}
	if err := d.Sync(ctx); err != nil {
		t.Errorf("an error reported twice: %v", err)
	}

	a.in = a.in[:64]
	out, err := a.run(ctx, a.groups())
	if err != nil {
		t.Fatalf("after the faults: %v", err)
	}
	a.check(t, out)
}
