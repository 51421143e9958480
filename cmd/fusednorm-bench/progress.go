package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// progress tells a person on stderr what the bench is doing whenever a step takes longer
// than a second: the step's line after the first second, then its elapsed time every ten
// seconds, so a run is never silent for long and a fast run prints nothing extra.
type progress struct {
	w     io.Writer
	mu    sync.Mutex
	stop  chan struct{}
	done  chan struct{}
	after time.Duration // quiet this long before the first line
	every time.Duration // then a line this often
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, after: time.Second, every: 10 * time.Second}
}

// step ends the previous step and starts one described by msg (e.g. "case 3/8 ...: timing").
func (p *progress) step(msg string) {
	p.end()
	p.mu.Lock()
	defer p.mu.Unlock()
	stop, done := make(chan struct{}), make(chan struct{})
	p.stop, p.done = stop, done
	go func() {
		defer close(done)
		t0 := time.Now()
		wait := p.after
		for first := true; ; first = false {
			select {
			case <-stop:
				return
			case <-time.After(wait):
			}
			if first {
				fmt.Fprintf(p.w, "fusednorm-bench: %s…\n", msg)
			} else {
				fmt.Fprintf(p.w, "fusednorm-bench: %s… %.0f s\n", msg, time.Since(t0).Seconds())
			}
			wait = p.every
		}
	}()
}

// end stops the current step's reporter, if any, and waits until it has stopped writing.
func (p *progress) end() {
	p.mu.Lock()
	stop, done := p.stop, p.done
	p.stop, p.done = nil, nil
	p.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}
