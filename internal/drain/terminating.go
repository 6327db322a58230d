package drain

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TerminatingMargin is how long past the end of its grace period a terminating pod is
// waited for. After it, as kubectl drain --skip-wait-for-delete-timeout and Cluster API
// do, the pod no longer holds the drain: its kubelet is gone or stuck, and the pod will
// not run again anyway. A pod on a node that is not Ready never holds it.
const TerminatingMargin = time.Minute

// TerminatingClock measures how long a pod has been terminating on gpupool's own clock.
// Its zero value is ready to use; it is safe for concurrent use.
//
// A pod's deletionTimestamp is stamped by the API server's clock (the time the delete
// was asked plus the grace period). Comparing it with gpupool's clock would wait too long
// for a terminating pod when the manager's clock runs behind the API server's, and stop
// waiting early when it runs ahead. So a terminating pod holds a drain for its grace
// period plus TerminatingMargin from the moment gpupool first saw it terminating: the
// only times compared are both gpupool's, and the grace period is a duration the API
// server reports (deletionGracePeriodSeconds), not an instant.
//
// What it remembers is not persisted: after a restart the wait starts again when the new
// manager first sees the pod, so it is at most one grace period plus TerminatingMargin
// longer, never shorter.
type TerminatingClock struct {
	mu    sync.Mutex
	first map[types.UID]time.Time
	// swept is when forget last ran.
	swept time.Time
}

// forgetAfter is how long past its deadline a pod is remembered: long enough that a pod
// seen again is not taken for a new one, short enough that pods gone for good do not
// pile up.
const forgetAfter = time.Hour

// Holds tells whether the terminating pod p still holds a drain at now (gpupool's clock):
// only on a Ready node, and only within its grace period plus TerminatingMargin of the
// moment gpupool first saw it terminating.
func (c *TerminatingClock) Holds(p *corev1.Pod, nodeReady bool, now time.Time) bool {
	if !nodeReady {
		return false
	}
	return now.Before(c.firstSeen(p, now).Add(gracePeriod(p) + TerminatingMargin))
}

// Evicted records that p's eviction was granted at now: p is terminating from then on
// (Known), and its wait starts then, even while a read that lags the API server (a pod
// watch behind) still shows it running, so that a drain never asks to evict it twice.
func (c *TerminatingClock) Evicted(p *corev1.Pod, now time.Time) { c.firstSeen(p, now) }

// Known tells whether p was seen terminating or its eviction was granted (Evicted), and
// not forgotten since.
func (c *TerminatingClock) Known(p *corev1.Pod) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.first[p.UID]
	return ok
}

// firstSeen is when gpupool first saw p terminating, now if this is the first time.
func (c *TerminatingClock) firstSeen(p *corev1.Pod, now time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.first == nil {
		c.first = map[types.UID]time.Time{}
	}
	if now.Sub(c.swept) > forgetAfter || c.swept.After(now) {
		c.forget(now)
	}
	at, ok := c.first[p.UID]
	if !ok || at.After(now) {
		// Note: a time after now is a clock that was stepped back (a test's fake clock,
		// an NTP correction): start the wait again rather than wait for the step.
		at = now
		c.first[p.UID] = at
	}
	return at
}

// forget drops the pods first seen longer ago than any wait plus forgetAfter. Called
// with c.mu held.
func (c *TerminatingClock) forget(now time.Time) {
	c.swept = now
	for uid, at := range c.first {
		if now.Sub(at) > maxGracePeriod+TerminatingMargin+forgetAfter {
			delete(c.first, uid)
		}
	}
}

// maxGracePeriod caps the grace period read from a pod, so that an absurd value cannot
// overflow a time.Duration; no sane grace period comes near it.
const maxGracePeriod = 24 * time.Hour

// gracePeriod is the pod's grace period as the API server reports it on deletion, capped
// at maxGracePeriod.
func gracePeriod(p *corev1.Pod) time.Duration {
	s := p.DeletionGracePeriodSeconds
	switch {
	case s == nil || *s <= 0:
		return 0
	case *s >= int64(maxGracePeriod/time.Second):
		return maxGracePeriod
	}
	return time.Duration(*s) * time.Second
}
