package execute

import (
	"sync"

	"github.com/gpupool/gpupool/vsphere"
)

// startSlots bound a pool's task starts asked at once (Starts.Limit), and choose which
// waiting start goes next: a start that frees a GPU or readies a VM for its next step (a
// suspend, a power-off, a reconfigure) before a power-on, and in the order they came
// within each kind. A power-on frees nothing another step waits for, while a park frees
// a GPU that up to a whole host's power-ons wait for (issue 37: at 64 hosts the suspends
// of night -> day's ~200 empty nodes, due at once, were asked over 8.5 s, the later ones
// behind the power-on groups their first GPUs freed). Power-ons go whenever no other
// start waits; parks arrive only as drains end and each is asked in one call, so
// power-ons are held back by bursts of parks, not indefinitely.
type startSlots struct {
	mu   sync.Mutex
	free int
	// waiting are the starts waiting for a slot, by class (slotClass), first come first.
	waiting [2][]chan struct{}
}

func newStartSlots(n int) *startSlots { return &startSlots{free: n} }

// slotClass is the class a start of op waits in: 0 goes before 1.
func slotClass(op vsphere.Op) int {
	if op == vsphere.OpPowerOn {
		return 1
	}
	return 0
}

// acquire waits for a slot for a start of op.
func (s *startSlots) acquire(op vsphere.Op) { <-s.enqueue(op) }

// enqueue asks for a slot for a start of op: the channel is closed once it has one.
func (s *startSlots) enqueue(op vsphere.Op) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	if s.free > 0 { // no start waits while a slot is free
		s.free--
		close(ch)
		return ch
	}
	c := slotClass(op)
	s.waiting[c] = append(s.waiting[c], ch)
	return ch
}

// queued is how many starts wait for a slot (the tests).
func (s *startSlots) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting[0]) + len(s.waiting[1])
}

// release hands the slot to the first waiting start of the first class that has one,
// or frees it.
func (s *startSlots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.waiting {
		if q := s.waiting[c]; len(q) > 0 {
			ch := q[0]
			q[0] = nil
			s.waiting[c] = q[1:]
			if len(s.waiting[c]) == 0 {
				s.waiting[c] = nil // the backing array goes with the queue
			}
			close(ch)
			return
		}
	}
	s.free++
}
