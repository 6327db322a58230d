package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/requests"
)

// The steering verbs (switch, resume, pause, unpause) create GPUPoolRequests by default,
// so that a GitOps sync of the pool's manifest does not revert them (docs/gitops.md);
// --in-spec writes the pool's spec.override and spec.paused as before.

// inSpecFlag is the flag's help, one text for the four verbs.
const inSpecFlag = "write the pool's spec (spec.override, spec.paused) instead of creating a GPUPoolRequest: needs gpupool-editor, and a GitOps tool that owns the pool reverts it"

// poolRequests are the pool's requests and what they mean at now, as the operator
// decides it (internal/requests).
func poolRequests(ctx context.Context, c client.Reader, p *gpupoolv1.GPUPoolProfile, now time.Time) (requests.Result, error) {
	var all gpupoolv1.GPUPoolRequestList
	if err := c.List(ctx, &all); err != nil {
		return requests.Result{}, fmt.Errorf("listing the requests of pool %s: %w", p.Name, err)
	}
	var mine []gpupoolv1.GPUPoolRequest
	for _, q := range all.Items {
		if q.Spec.Pool == p.Name {
			mine = append(mine, q)
		}
	}
	return requests.Resolve(&p.Spec, mine, now), nil
}

// liveRequests are the pool's requests at now for status (a.requests; the zero Result
// when it is not set or the requests cannot be read, such as for a user bound to an
// older viewer role: status then shows the spec only).
func (a *app) liveRequests(p *gpupoolv1.GPUPoolProfile, now time.Time) requests.Result {
	if a.requests == nil {
		return requests.Result{}
	}
	live, err := poolRequests(context.Background(), a.requests, p, now)
	if err != nil {
		return requests.Result{}
	}
	return live
}

// createRequest creates a request for the pool, named after the pool and the action.
func createRequest(ctx context.Context, c client.Client, pool string, spec gpupoolv1.GPUPoolRequestSpec) (*gpupoolv1.GPUPoolRequest, error) {
	spec.Pool = pool
	q := &gpupoolv1.GPUPoolRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: pool + "-" + strings.ToLower(string(spec.Action)) + "-"}, Spec: spec}
	if err := c.Create(ctx, q); err != nil {
		return nil, fmt.Errorf("creating a %s request for pool %s: %w", spec.Action, pool, err)
	}
	return q, nil
}

// requestUntil is when a request made now ends, for what the command shows: --until
// (already parsed), --for, or the default of 8h.
func requestUntil(now time.Time, d time.Duration, until *metav1.Time) *metav1.Time {
	switch {
	case until != nil:
		return until
	case d > 0:
		return &metav1.Time{Time: now.Add(d).Truncate(time.Second)}
	}
	return &metav1.Time{Time: now.Add(gpupoolv1.DefaultRequestDuration).Truncate(time.Second)}
}

// lasting is how long a request made with --for (or the default) lasts: the request
// names the duration, which gpupool counts on its own clock from when it takes the
// request into account, not an end this machine's clock would stamp. With --until it
// names that time (nil here).
func lasting(d time.Duration, until string) *metav1.Duration {
	switch {
	case until != "":
		return nil
	case d > 0:
		return &metav1.Duration{Duration: d}
	}
	return &metav1.Duration{Duration: gpupoolv1.DefaultRequestDuration}
}

// explicitUntil is the --until a request names (nil with --for or the default).
func explicitUntil(until *metav1.Time, flag string) *metav1.Time {
	if flag == "" {
		return nil
	}
	return until
}
