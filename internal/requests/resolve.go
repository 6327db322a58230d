// Package requests decides what a pool's GPUPoolRequests mean at a time: which one
// forces a layout, whether the pool is paused, and the phase each request reaches. It
// reads nothing and writes nothing (the pool controller lists the requests and writes
// their status); everything is a function of the requests, the pool's spec and now.
//
// Precedence (docs/gitops.md): a live request beats the pool's spec.
//   - The newest live Switch request forces its layout over spec.override and the
//     schedule, until it expires.
//   - A Switch or Resume request supersedes every earlier Switch request of the pool;
//     an Unpause request supersedes every earlier Pause request. Resume and Unpause take
//     effect once (Completed): they end requests, never the pool's own spec.override or
//     spec.paused, which are Git's.
//   - The pool is paused while spec.paused is true or any Pause request is live.
//
// Earlier and later are by creationTimestamp; within the same second a Resume or
// Unpause counts as the later (a person who switches and takes it back at once wants it
// taken back), then by name.
package requests

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Verdict is what one request comes to.
type Verdict struct {
	Name      string
	Phase     gpupoolv1.RequestPhase
	Message   string
	ExpiresAt *time.Time // nil: Resume and Unpause
}

// Result is what a pool's requests mean at a time.
type Result struct {
	// Switch is the request whose layout is forced (nil: none); Override is the
	// spec.override it stands for.
	Switch   *gpupoolv1.GPUPoolRequest
	Override *gpupoolv1.Override
	// Pausing are the live Pause requests, oldest first.
	Pausing []*gpupoolv1.GPUPoolRequest
	// Verdicts are every request's phase, in the order of the input.
	Verdicts []Verdict
	// Next is the earliest expiry of a live request after now (zero: none): the pool
	// looks again then.
	Next time.Time
}

// Paused tells whether a Pause request is live.
func (r Result) Paused() bool { return len(r.Pausing) > 0 }

// Expiry is when a Switch or Pause request expires: spec.until, or spec.duration (or
// DefaultRequestDuration) from when it took effect (status.startTime, stamped on
// gpupool's clock), or from now for one that has not yet. Resume and Unpause do not
// expire (zero).
//
// Note: not from its creationTimestamp, which the API server's clock stamped: gpupool
// compares expiries with its own clock, and the two may be apart.
func Expiry(q *gpupoolv1.GPUPoolRequest, now time.Time) time.Time {
	s := &q.Spec
	if s.Action != gpupoolv1.RequestSwitch && s.Action != gpupoolv1.RequestPause {
		return time.Time{}
	}
	if s.Until != nil {
		return s.Until.Time
	}
	d := gpupoolv1.DefaultRequestDuration
	if s.Duration != nil {
		d = s.Duration.Duration
	}
	if st := q.Status.StartTime; st != nil {
		return st.Add(d)
	}
	return now.Add(d)
}

// final tells whether a recorded phase is final: a request that reached one stays
// there, even after the request that superseded it is deleted.
func final(p gpupoolv1.RequestPhase) bool {
	return p == gpupoolv1.RequestCompleted || p == gpupoolv1.RequestExpired || p == gpupoolv1.RequestSuperseded
}

// ends tells whether action a of a later request ends an earlier request doing b.
func ends(a, b gpupoolv1.RequestAction) bool {
	switch b {
	case gpupoolv1.RequestSwitch:
		return a == gpupoolv1.RequestSwitch || a == gpupoolv1.RequestResume
	case gpupoolv1.RequestPause:
		return a == gpupoolv1.RequestUnpause
	}
	return false
}

// later orders requests from earliest to latest (see the package comment).
func later(a, b *gpupoolv1.GPUPoolRequest) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	rank := func(q *gpupoolv1.GPUPoolRequest) int {
		if q.Spec.Action == gpupoolv1.RequestResume || q.Spec.Action == gpupoolv1.RequestUnpause {
			return 1
		}
		return 0
	}
	return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a.Name, b.Name))
}

// Resolve decides what the requests of the pool with spec mean at now. reqs are the
// pool's requests (spec.pool is the pool's name); they are not changed.
func Resolve(spec *gpupoolv1.GPUPoolProfileSpec, reqs []gpupoolv1.GPUPoolRequest, now time.Time) Result {
	order := make([]*gpupoolv1.GPUPoolRequest, len(reqs))
	for i := range reqs {
		order[i] = &reqs[i]
	}
	slices.SortStableFunc(order, later)
	verdicts := make(map[*gpupoolv1.GPUPoolRequest]Verdict, len(reqs))
	var res Result
	for i, q := range order {
		v := Verdict{Name: q.Name}
		if at := Expiry(q, now); !at.IsZero() {
			v.ExpiresAt = &at
		}
		v.Phase, v.Message = phase(spec, q, order[i+1:], v.ExpiresAt, now)
		verdicts[q] = v
		if v.Phase != gpupoolv1.RequestActive {
			continue
		}
		if res.Next.IsZero() || v.ExpiresAt.Before(res.Next) {
			res.Next = *v.ExpiresAt
		}
		switch q.Spec.Action {
		case gpupoolv1.RequestSwitch:
			res.Switch = q // the later ones superseded the earlier: one is Active at most
		case gpupoolv1.RequestPause:
			res.Pausing = append(res.Pausing, q)
		}
	}
	if q := res.Switch; q != nil {
		res.Override = &gpupoolv1.Override{Layout: q.Spec.Layout, Until: &metav1.Time{Time: *verdicts[q].ExpiresAt}, Reason: Why(q)}
	}
	for i := range reqs {
		res.Verdicts = append(res.Verdicts, verdicts[&reqs[i]])
	}
	return res
}

// phase is the phase request q reaches at now, given the requests after it.
func phase(spec *gpupoolv1.GPUPoolProfileSpec, q *gpupoolv1.GPUPoolRequest, after []*gpupoolv1.GPUPoolRequest, expires *time.Time, now time.Time) (gpupoolv1.RequestPhase, string) {
	if p := q.Status.Phase; final(p) {
		return p, cmp.Or(q.Status.Message, string(p))
	}
	act := q.Spec.Action
	if act == gpupoolv1.RequestResume || act == gpupoolv1.RequestUnpause {
		ended := gpupoolv1.RequestSwitch
		if act == gpupoolv1.RequestUnpause {
			ended = gpupoolv1.RequestPause
		}
		return gpupoolv1.RequestCompleted, fmt.Sprintf("ends the %s requests of pool %s made before it", ended, q.Spec.Pool)
	}
	for _, b := range after {
		if ends(b.Spec.Action, act) {
			return gpupoolv1.RequestSuperseded, fmt.Sprintf("superseded by the later %s request %s", b.Spec.Action, b.Name)
		}
	}
	if !now.Before(*expires) {
		return gpupoolv1.RequestExpired, fmt.Sprintf("expired at %s", expires.UTC().Format(time.RFC3339))
	}
	if act == gpupoolv1.RequestSwitch && !hasLayout(spec, q.Spec.Layout) {
		return gpupoolv1.RequestInvalid, fmt.Sprintf("pool %s has no layout %q; its layouts are %s (create a request naming one of them)", q.Spec.Pool, q.Spec.Layout, layoutNames(spec))
	}
	if act == gpupoolv1.RequestSwitch {
		return gpupoolv1.RequestActive, fmt.Sprintf("layout %s is forced on pool %s until %s", q.Spec.Layout, q.Spec.Pool, expires.UTC().Format(time.RFC3339))
	}
	return gpupoolv1.RequestActive, fmt.Sprintf("pool %s is paused until %s", q.Spec.Pool, expires.UTC().Format(time.RFC3339))
}

// Why is how the pool's status names the request: "request NAME" and its reason.
func Why(q *gpupoolv1.GPUPoolRequest) string {
	s := "request " + q.Name
	if q.Spec.Reason != "" {
		s += ": " + q.Spec.Reason
	}
	return s
}

func hasLayout(spec *gpupoolv1.GPUPoolProfileSpec, name string) bool {
	return slices.ContainsFunc(spec.Layouts, func(l gpupoolv1.Layout) bool { return l.Name == name })
}

func layoutNames(spec *gpupoolv1.GPUPoolProfileSpec) string {
	names := make([]string, 0, len(spec.Layouts))
	for _, l := range spec.Layouts {
		names = append(names, l.Name)
	}
	return strings.Join(names, ", ")
}

// Effective is spec with the requests applied: the forced layout as spec.override and
// the pause as spec.paused. spec is not changed; the copy shares what it does not
// change.
func Effective(spec *gpupoolv1.GPUPoolProfileSpec, res Result) *gpupoolv1.GPUPoolProfileSpec {
	if res.Override == nil && !res.Paused() {
		return spec
	}
	eff := *spec
	if res.Override != nil {
		eff.Override = res.Override
	}
	eff.Paused = eff.Paused || res.Paused()
	return &eff
}
