package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/record"
	"github.com/gpupool/gpupool/internal/trace"
)

// recordFlags are record's options.
type recordFlags struct {
	file    string
	period  time.Duration
	maxPods int
}

// defaultMaxPods bounds a recording: a week of a busy pool's GPU pods, a few hundred
// bytes each.
const defaultMaxPods = 100_000

func (a *app) recordCommand() *cobra.Command {
	var f recordFlags
	cmd := &cobra.Command{
		Use:   "record NAME --file FILE",
		Short: "Record what the pool sees (GPU pods, switches) into a trace for simulate",
		Long: `Record what the pool sees into a trace (JSON Lines, docs/simulate.md): every pod that asks
for the pool's GPUs (its extended resource, or with readiness.dra its claims), when it
arrived, started and ended, its tenant, the layouts whose nodes could take it and its
scheduling constraints; and the pool's switches as they happen. kubectl gpupool simulate
replays the trace under the pool's spec and under another.

Recording runs until --for has passed or it is interrupted (Ctrl-C), then writes FILE
whole. Times are this machine's clock as the watches saw each change. It needs get and
watch on the pool, and list and watch on pods and namespaces (a cluster reader's rights;
gpupool-viewer is not enough).`,
		Example: `  kubectl gpupool record lab --file lab-week.jsonl --for 168h
  kubectl gpupool simulate lab-week.jsonl --candidate night-earlier.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.record(cmd.Context(), args[0], f)
		},
	}
	cmd.Flags().StringVarP(&f.file, "file", "f", "", "File to write the trace to (- for standard output)")
	cmd.Flags().DurationVar(&f.period, "for", 0, "How long to record, such as 24h (default: until interrupted)")
	cmd.Flags().IntVar(&f.maxPods, "max-pods", defaultMaxPods, "At most this many pods are recorded; the trace says when more came")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func (a *app) record(ctx context.Context, name string, f recordFlags) error {
	if f.period < 0 {
		return fmt.Errorf("--for %s: give a positive duration such as 24h, or leave it out to record until interrupted", f.period)
	}
	if f.maxPods < 1 {
		return fmt.Errorf("--max-pods %d: give at least 1", f.maxPods)
	}
	c, err := a.watchClient()
	if err != nil {
		return err
	}
	var pool gpupoolv1.GPUPoolProfile
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &pool); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if f.period > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.period)
		defer cancel()
	}
	start := a.now()
	rs := &recording{app: a, c: c, rec: record.New(&pool, start, f.maxPods), pool: &pool, namespaces: map[string]bool{}, start: start}
	if err := rs.readScope(ctx); err != nil {
		return err
	}
	// Refused rights are said before anything is recorded (and no file is written).
	if err := c.List(ctx, &corev1.PodList{}, client.Limit(1)); err != nil {
		return fmt.Errorf("listing pods (record needs list and watch on pods): %w", err)
	}
	errc := make(chan error, 3)
	go func() { errc <- rs.pollWorkloads(ctx) }()
	go func() {
		errc <- a.watchPool(ctx, name, func(p *gpupoolv1.GPUPoolProfile) (bool, error) {
			rs.mu.Lock()
			defer rs.mu.Unlock()
			rs.rec.Pool(a.now(), p)
			return false, nil
		})
	}()
	go func() { errc <- rs.watchPods(ctx) }()
	var failed error
	for range 3 {
		if err := <-errc; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && failed == nil {
			failed = err
			stop() // end the other watch
		}
	}
	rs.mu.Lock()
	tr := rs.rec.Finish(a.now())
	rs.mu.Unlock()
	if failed != nil {
		// What was recorded is kept: a watch that fails after hours loses nothing.
		fmt.Fprintf(a.streams.ErrOut, "recording ended early: %v\n", failed)
	}
	if err := writeTrace(f.file, a.streams.Out, tr); err != nil {
		return err
	}
	fmt.Fprintln(a.streams.ErrOut, summary(tr, f.file))
	return failed
}

func writeTrace(path string, stdout io.Writer, tr *trace.Trace) error {
	if path == "-" {
		return trace.Write(stdout, tr)
	}
	return writeFile(path, func(w io.Writer) error { return trace.Write(w, tr) })
}

func summary(tr *trace.Trace, file string) string {
	pods, switches := 0, 0
	for _, ev := range tr.Events {
		switch ev.Kind {
		case trace.Arrive:
			pods++
		case trace.Switch:
			if !ev.At.Before(tr.Header.Start) {
				switches++
			}
		}
	}
	s := fmt.Sprintf("recorded %d pods and %d switches of pool %s from %s to %s into %s", pods, switches, tr.Header.Pool,
		tr.Header.Start.Format(time.RFC3339), tr.Header.End.Format(time.RFC3339), file)
	if tr.Header.Truncated {
		s += " (truncated: --max-pods reached, later pods were not recorded)"
	}
	return s
}

// workloadsEvery is how often record reads the Workloads gpupool's check holds (the pool's
// spec.kueue): a Workload is held for minutes, until its layout is ready.
const workloadsEvery = 5 * time.Second

// pollWorkloads records the Workloads the pool's admission check holds, read every
// workloadsEvery, until ctx ends. A read that fails (Kueue not served, no right to list
// Workloads) is said once and tried again; it ends nothing.
func (rs *recording) pollWorkloads(ctx context.Context) error {
	if rs.pool.Spec.Kueue == nil {
		return nil
	}
	t := time.NewTicker(workloadsEvery)
	defer t.Stop()
	said := ""
	for {
		held, err := controllers.HeldWorkloads(ctx, rs.c, rs.pool)
		switch {
		case err != nil && ctx.Err() == nil && err.Error() != said:
			said = err.Error()
			fmt.Fprintf(rs.streams.ErrOut, "Workloads not recorded for now (record needs list on Kueue's workloads, clusterqueues and admissionchecks): %v\n", err)
		case err == nil:
			rs.mu.Lock()
			rs.renewScope(ctx, held)
			rs.rec.Workloads(rs.now(), held)
			rs.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// recording is one record run: the recorder and what its pod watch keeps.
type recording struct {
	*app
	c    client.WithWatch
	pool *gpupoolv1.GPUPoolProfile
	mu   sync.Mutex
	rec  *record.Recorder
	// namespaces are those the scope was last read with: a pod of another renews it.
	namespaces map[string]bool
	// start is when the recording started.
	start time.Time
	// live are the GPU pods seen and not deleted, to tell which a new list lost; gpus
	// what each pod with GPUs or claims asks for (a claim pod's claims are read once).
	// Both hold live pods only.
	live map[types.UID]*corev1.Pod
	gpus map[types.UID]int64
}

// readScope reads the namespaces: which the pool's demand selects, and each one's tenant
// (spec.accounting.tenantLabel, else its name).
func (rs *recording) readScope(ctx context.Context) error {
	var nss metav1.PartialObjectMetadataList
	nss.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := rs.c.List(ctx, &nss); err != nil {
		return fmt.Errorf("listing namespaces (record needs list on namespaces): %w", err)
	}
	scope, err := demand.ScopeOf(rs.pool, nss.Items)
	if err != nil {
		return err
	}
	tenants := map[string]string{}
	label := ""
	if acc := rs.pool.Spec.Accounting; acc != nil {
		label = acc.TenantLabel
	}
	for _, ns := range nss.Items {
		rs.namespaces[ns.Name] = true
		if v := ns.Labels[label]; label != "" && v != "" {
			tenants[ns.Name] = v
		}
	}
	rs.rec.Scope = scope
	rs.rec.Tenant = func(ns string) string {
		if t, ok := tenants[ns]; ok {
			return t
		}
		return ns
	}
	return nil
}

// watchPods lists the cluster's pods and follows them, listing again when a watch ends;
// a pod a new list no longer has was deleted meanwhile.
func (rs *recording) watchPods(ctx context.Context) error {
	rs.live, rs.gpus = map[types.UID]*corev1.Pod{}, map[types.UID]int64{}
	first := true
	for {
		var list corev1.PodList
		if err := rs.c.List(ctx, &list); err != nil {
			return firstErr(ctx.Err(), fmt.Errorf("listing pods (record needs list and watch on pods): %w", err))
		}
		listed := map[types.UID]bool{}
		for i := range list.Items {
			listed[list.Items[i].UID] = true
			rs.seePod(ctx, &list.Items[i], false, first)
		}
		first = false
		for uid, p := range rs.live {
			if !listed[uid] {
				rs.seePod(ctx, p, true, false)
			}
		}
		for uid := range rs.gpus {
			if !listed[uid] {
				delete(rs.gpus, uid) // deleted while no watch ran
			}
		}
		w, err := rs.c.Watch(ctx, &corev1.PodList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			return firstErr(ctx.Err(), err)
		}
		err = rs.followPods(ctx, w)
		w.Stop()
		if err != nil {
			return err
		}
	}
}

// followPods hands each pod change of one watch to seePod until the watch ends (nil: list
// again) or ctx does.
func (rs *recording) followPods(ctx context.Context, w watch.Interface) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return nil
			}
			if p, ok := ev.Object.(*corev1.Pod); ok {
				rs.seePod(ctx, p, ev.Type == watch.Deleted, false)
			}
		}
	}
}

// seePod records a pod's change, if it asks for the pool's GPUs, and tells the test hook.
// A pod of the first list was there when the recording started: it is recorded at the
// start.
func (rs *recording) seePod(ctx context.Context, p *corev1.Pod, deleted, atStart bool) {
	rs.recordPod(ctx, p, deleted, atStart)
	if rs.podSeen != nil {
		rs.podSeen(p, deleted)
	}
}

func (rs *recording) recordPod(ctx context.Context, p *corev1.Pod, deleted, atStart bool) {
	gpus, ok := rs.gpus[p.UID]
	if !ok {
		var known bool
		gpus, known = rs.gpusOf(ctx, p)
		if gpus > 0 || (known && len(p.Spec.ResourceClaims) > 0) {
			// Kept while the pod lives: a claim pod's claims are read once they say.
			rs.gpus[p.UID] = gpus
		}
	}
	if deleted {
		delete(rs.gpus, p.UID)
	}
	if gpus == 0 {
		return // not the pool's
	}
	if deleted || demand.Finished(p) {
		delete(rs.live, p.UID)
	} else {
		rs.live[p.UID] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID}}
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.seeNamespace(ctx, p.Namespace)
	now := rs.now()
	if atStart {
		now = rs.start
	}
	rs.rec.Pod(now, p, gpus, deleted)
}

// seeNamespace reads the scope again for a namespace made after it was read (once per
// name), so that a tenant's first pod or Workload there is counted as demand counts it.
// rs.mu is held.
func (rs *recording) seeNamespace(ctx context.Context, ns string) {
	if rs.namespaces[ns] {
		return
	}
	rs.namespaces[ns] = true
	if err := rs.readScope(ctx); err != nil {
		fmt.Fprintf(rs.streams.ErrOut, "namespace %s: %v\n", ns, err)
	}
}

// renewScope is seeNamespace for the Workloads' namespaces. rs.mu is held.
func (rs *recording) renewScope(ctx context.Context, held []demand.Held) {
	for _, h := range held {
		rs.seeNamespace(ctx, h.Namespace)
	}
}

// gpusOf is what the pod asks of the pool's GPUs: its extended resource, or with
// readiness.dra the devices of its claims of the pool's class. known is false while its
// claims cannot be read or do not exist yet (a template made after the pod; an API
// error): the pod is looked at again on its next change rather than dropped.
func (rs *recording) gpusOf(ctx context.Context, p *corev1.Pod) (gpus int64, known bool) {
	if n := demand.PodGPUs(p, demand.GPUResource(rs.pool)); n > 0 {
		return n, true
	}
	dra := rs.pool.Spec.Readiness.DRA
	if dra == nil || len(p.Spec.ResourceClaims) == 0 {
		return 0, true
	}
	n, err := demand.PodClaimDevices(ctx, rs.c, dra.DeviceClassName, p)
	if err != nil {
		fmt.Fprintf(rs.streams.ErrOut, "pod %s/%s: its claims cannot be read yet: %v\n", p.Namespace, p.Name, err)
		return 0, false
	}
	// A claim that does not exist reads as none: known once the pod is bound (its
	// claims were allocated) or finished.
	return n, n > 0 || p.Spec.NodeName != "" || demand.Finished(p)
}
