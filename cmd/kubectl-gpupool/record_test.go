package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/trace"
)

// recordRun is kubectl gpupool record running in the background on a clock the test
// steps: each change is made at a known instant and the test waits (bounded) until the
// recorder has handled it before the next.
type recordRun struct {
	t      *testing.T
	mu     sync.Mutex
	now    time.Time
	pods   chan string
	pools  chan *gpupoolv1.GPUPoolProfile
	cancel context.CancelFunc
	errc   chan error
	out    bytes.Buffer
}

func (r *recordRun) clock() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now
}

func (r *recordRun) set(t time.Time) {
	r.mu.Lock()
	r.now = t
	r.mu.Unlock()
}

// startRecord runs record as user into file at now.
func startRecord(t *testing.T, user, pool, file string, now time.Time) *recordRun {
	r := &recordRun{t: t, now: now, pods: make(chan string, 256), pools: make(chan *gpupoolv1.GPUPoolProfile, 256), errc: make(chan error, 1)}
	a := newApp(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &r.out, ErrOut: &r.out}, r.clock)
	a.podSeen = func(p *corev1.Pod, deleted bool) {
		state := string(p.Status.Phase)
		if deleted {
			state = "deleted"
		}
		r.pods <- p.Name + " " + state
	}
	a.watched = func(p *gpupoolv1.GPUPoolProfile) { r.pools <- p.DeepCopy() }
	cmd := a.command()
	cmd.SetArgs([]string{"--kubeconfig", kubeconfigs[user], "record", pool, "--file", file})
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.errc <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(cancel)
	return r
}

// waitPod waits until the recorder has handled the pod in the state ("Running",
// "deleted", ...).
func (r *recordRun) waitPod(nameState string) {
	r.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case s := <-r.pods:
			if s == nameState {
				return
			}
		case <-timeout:
			r.t.Fatalf("the recorder did not see %s within 30s", nameState)
		}
	}
}

// waitPool waits until the recorder has handled a pool state for which ok holds.
func (r *recordRun) waitPool(ok func(*gpupoolv1.GPUPoolProfile) bool) {
	r.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case p := <-r.pools:
			if ok(p) {
				return
			}
		case <-timeout:
			r.t.Fatal("the recorder did not see the pool's change within 30s")
		}
	}
}

// TestRecordAsAdmin (issue 39, recording): record follows the pool and the cluster's
// pods on its own clock. Each change below is made at a minute of its own, and the trace
// has exactly the events they make, at those minutes: a pod there before arrives at the
// start; a training pod (night only, demand
// counts it) arrives, is bound and runs, a switch to night starts and completes, the pod
// succeeds; a service (both layouts) arrives and is deleted; a pod without GPUs and a
// pod of another GPU resource are not recorded. A viewer may not record (it cannot list
// pods), and is told what it lacks.
func TestRecordAsAdmin(t *testing.T) {
	w := newWorld(t, "rec-")
	p := w.pool()
	for i := range p.Spec.Layouts {
		for j := range p.Spec.Layouts[i].Workers {
			p.Spec.Layouts[i].Workers[j].NoNode = false
		}
	}
	p.Spec.Layouts[1].NodeLabels = map[string]string{"lab.example/workload": "training"}
	p.Spec.Demand = &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{},
		Rules: []gpupoolv1.DemandRule{{Layout: "night", Action: gpupoolv1.DemandBringIn}}}
	w.create(p)
	ns := "rec-ml"
	w.must(admin.Create(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	t.Cleanup(func() { _ = admin.Delete(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) })
	p = w.get()
	p.Status.ActiveLayout = "day"
	w.must(admin.Status().Update(w.ctx, p))

	file := filepath.Join(t.TempDir(), "trace.jsonl")
	t0 := mondayMorning
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	pod := func(name string, res corev1.ResourceName, sel map[string]string) *corev1.Pod {
		q := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{NodeSelector: sel, Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
		if res != "" {
			q.Spec.Containers[0].Resources.Limits = corev1.ResourceList{res: resource.MustParse("2")}
		}
		w.must(admin.Create(w.ctx, q))
		t.Cleanup(func() { _ = admin.Delete(w.ctx, q, client.GracePeriodSeconds(0)) })
		return q
	}
	// A pod there before the recording arrives at its start (the first list).
	pod("pre", nodes.DefaultGPUResource, nil)
	r := startRecord(t, "admin", w.name, file, t0)
	r.waitPool(func(*gpupoolv1.GPUPoolProfile) bool { return true })
	r.waitPod("pre Pending")

	r.set(at(1))
	train := pod("train", nodes.DefaultGPUResource, map[string]string{"lab.example/workload": "training"})
	r.waitPod("train Pending")
	r.set(at(2))
	pod("web", nodes.DefaultGPUResource, nil)
	r.waitPod("web Pending")
	pod("plain", "", nil)
	r.waitPod("plain Pending")
	pod("other", "example.com/fpga", nil)
	r.waitPod("other Pending")

	r.set(at(3))
	w.must(admin.SubResource("binding").Create(w.ctx, train, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: ns},
		Target: corev1.ObjectReference{Kind: "Node", Name: "gpu-night-1"}}))
	r.waitPod("train Pending")
	w.must(admin.Get(w.ctx, client.ObjectKeyFromObject(train), train))
	train.Status.Phase = corev1.PodRunning
	w.must(admin.Status().Update(w.ctx, train))
	r.waitPod("train Running")

	r.set(at(4))
	p = w.get()
	p.Status.Transition = &gpupoolv1.TransitionStatus{ID: "t-1", To: "night", Reason: gpupoolv1.DesiredByDemand, StartTime: metav1.NewTime(at(4))}
	w.must(admin.Status().Update(w.ctx, p))
	r.waitPool(func(p *gpupoolv1.GPUPoolProfile) bool { return p.Status.Transition != nil })
	r.set(at(5))
	p = w.get()
	p.Status.Transition, p.Status.ActiveLayout = nil, "night"
	p.Status.History = append(p.Status.History, gpupoolv1.TransitionRecord{ID: "t-1", From: "day", To: "night", Reason: gpupoolv1.DesiredByDemand,
		Result: gpupoolv1.TransitionCompleted, StartTime: metav1.NewTime(at(4)), EndTime: metav1.NewTime(at(5))})
	w.must(admin.Status().Update(w.ctx, p))
	r.waitPool(func(p *gpupoolv1.GPUPoolProfile) bool { return p.Status.Transition == nil })

	r.set(at(6))
	w.must(admin.Get(w.ctx, client.ObjectKeyFromObject(train), train))
	train.Status.Phase = corev1.PodSucceeded
	w.must(admin.Status().Update(w.ctx, train))
	r.waitPod("train Succeeded")
	r.set(at(7))
	w.must(admin.Delete(w.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}}, client.GracePeriodSeconds(0)))
	r.waitPod("web deleted")

	r.set(at(8))
	r.cancel()
	if err := <-r.errc; err != nil {
		t.Fatalf("record: %v\n%s", err, r.out.String())
	}
	if !strings.Contains(r.out.String(), "recorded 3 pods and 1 switches of pool rec-lab") {
		t.Errorf("record's summary:\n%s", r.out.String())
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := trace.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	h := tr.Header
	if h.Pool != w.name || !h.Start.Equal(t0) || !h.End.Equal(at(8)) || h.Active != "day" || h.Capacity["day"] != (trace.Capacity{GPUs: 4, Equivalents: 1}) ||
		h.Capacity["night"] != (trace.Capacity{GPUs: 1, Equivalents: 1}) || len(h.Spec.Layouts) != 2 {
		t.Errorf("header %+v", h)
	}
	type ev struct {
		at         time.Time
		kind, what string
	}
	want := []ev{
		{at(0), trace.Arrive, "rec-ml/pre 2 [day night] counts"},
		{at(1), trace.Arrive, "rec-ml/train 2 [night] counts"},
		{at(2), trace.Arrive, "rec-ml/web 2 [day night] counts"},
		{at(3), trace.Start, "rec-ml/train"},
		{at(4), trace.Switch, "day->night Demand finished " + at(5).Format(time.TimeOnly)},
		{at(6), trace.End, "rec-ml/train succeeded"},
		{at(7), trace.End, "rec-ml/web deleted"},
	}
	var got []ev
	for _, e := range tr.Events {
		what := e.Pod
		switch e.Kind {
		case trace.Arrive:
			what += " " + strings.TrimSpace(strings.Join([]string{strconv.FormatInt(e.GPUs, 10), "[" + strings.Join(e.Layouts, " ") + "]", map[bool]string{true: "counts"}[e.Counts]}, " "))
		case trace.End:
			what += " " + e.Outcome
		case trace.Switch:
			what = e.From + "->" + e.To + " " + string(e.Reason) + " finished " + e.Finished.In(t0.Location()).Format(time.TimeOnly)
		}
		got = append(got, ev{e.At, e.Kind, what})
	}
	if len(got) != len(want) {
		t.Fatalf("events %+v, want %+v", got, want)
	}
	for i := range want {
		if !got[i].at.Equal(want[i].at) || got[i].kind != want[i].kind || got[i].what != want[i].what {
			t.Errorf("event %d: %+v, want %+v", i, got[i], want[i])
		}
	}

	// A viewer cannot list pods or namespaces: told what record needs, no file left.
	denied := filepath.Join(t.TempDir(), "denied.jsonl")
	out, err := w.run("viewer", "", "record", w.name, "--file", denied, "--for", "1m")
	if err == nil || !strings.Contains(out+err.Error(), "record needs list on namespaces") {
		t.Errorf("record as viewer: %v\n%s", err, out)
	}
	if _, err := os.Stat(denied); !os.IsNotExist(err) {
		t.Errorf("record as viewer left a file: %v", err)
	}
}
