package execute

import (
	"context"
	"sync"
)

// DrainWatch tells the suspends after drains when the pods of their nodes are gone
// (afterdrains.go), as the pods' watches show it. A suspend waits on it without a
// goroutine of its own (issue 37: at 64 hosts a thousand suspends waiting for their
// hosts' drains were two thousand goroutines, their stacks and contexts a tenth of the
// manager's memory at a switch's peak).
type DrainWatch interface {
	// Drained reports whether the watched pods of node are gone but those a drain
	// leaves alone (drain.Gone); known is false when it cannot tell (the node's pods are
	// not watched, or not listed yet).
	Drained(node string) (drained, known bool)
	// OnChange calls fn once, the next time the pods of node change what a drain waits
	// for or its watch stops, unless stop was called first. fn is called from the
	// watch, never while the watch holds a lock: it must not block.
	OnChange(node string, fn func()) (stop func())
}

// drainGate is what a suspend after drains waits for: the pods of nodes gone.
type drainGate struct {
	nodes []string
	watch DrainWatch
}

// drainWait is one suspend after drains waiting for its gate. Nothing waits on it: the
// node's pods changing (DrainWatch.OnChange: check sweeps the nodes again), a pass that
// observed the drains ended (OpenGates), a cancel, the start stale (StartTimeout past
// its handout or the last pass that renewed it: afterStale) or the Starts' end resolve
// it, once (end), and then calls then(open) in a goroutine of its own, which goes on to
// the start's node write and its call to vCenter.
//
// Locks: check holds w.mu while it takes the watch's (OnChange, Drained, stop); end
// takes w.mu, and the watch's and the stale timer's (stop) only after it released w.mu;
// Starts calls end holding s.mu (Cancel, OpenGates), so the timer's lock comes after
// s.mu, and the timer takes s.mu only before its own; then runs without w.mu and takes
// s.mu. The watch calls OnChange's functions without its lock, and never takes w.mu or
// s.mu itself.
type drainWait struct {
	gate *drainGate
	then func(open bool)

	mu   sync.Mutex
	done bool
	// unwatch ends the subscription to the node the sweep found pods on; stops end the
	// timer and the context's callback.
	unwatch func()
	stops   []func() bool
}

// awaitDrains arms the gate of a suspend after drains (grp.gate), whose record is rec:
// then(open) is called once, open when the drains ended (or a pass saw them end)
// before the start was stale, in a goroutine of its own.
func (s *Starts) awaitDrains(grp startGroup, rec *startRecord, then func(open bool)) {
	w := &drainWait{gate: grp.gate, then: then}
	s.mu.Lock()
	if s.stale(rec) {
		s.mu.Unlock()
		w.end(false)
		return
	}
	rec.stopGate = func() { w.end(false) }
	rec.openGate = func() { w.end(true) }
	var opened bool
	select {
	case <-rec.opened: // a pass saw the drains end before the gate was armed
		opened = true
	default:
	}
	s.mu.Unlock()
	if opened {
		w.end(true)
		return
	}
	stopTimer := s.afterStale([]*startRecord{rec}, func() { w.end(false) })
	stopCtx := context.AfterFunc(s.ctx, func() { w.end(false) })
	w.mu.Lock()
	done := w.done
	if !done {
		w.stops = []func() bool{stopTimer, stopCtx}
	}
	w.mu.Unlock()
	if done { // resolved meanwhile (a cancel)
		stopTimer()
		stopCtx()
		return
	}
	w.check()
}

// check sweeps the gate's nodes: the drains ended when no node has pods left; else the
// wait follows the first node found with pods, and sweeps again, from the first node,
// once they change, so that a pod bound meanwhile to a node swept before is seen. A
// node whose pods the watch cannot tell ends the wait, not open: a pass decides it.
func (w *drainWait) check() {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return
	}
	if w.unwatch != nil {
		w.unwatch()
		w.unwatch = nil
	}
	for _, node := range w.gate.nodes {
		// Subscribed before the read: a change after it calls check again.
		stop := w.gate.watch.OnChange(node, w.check)
		drained, known := w.gate.watch.Drained(node)
		switch {
		case !known:
			stop()
			w.mu.Unlock()
			w.end(false)
			return
		case !drained:
			w.unwatch = stop
			w.mu.Unlock()
			return
		}
		stop()
	}
	w.mu.Unlock()
	w.end(true)
}

// end resolves the wait once: it ends the subscription, the timer and the context's
// callback, and starts then.
func (w *drainWait) end(open bool) {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return
	}
	w.done = true
	unwatch, stops := w.unwatch, w.stops
	w.unwatch, w.stops = nil, nil
	w.mu.Unlock()
	if unwatch != nil {
		unwatch()
	}
	for _, stop := range stops {
		stop()
	}
	go w.then(open)
}
