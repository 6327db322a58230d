package controllers

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// expireFirstWatch is the API server's transport with the first plain watch of pods
// refused as too old (410), as the API server refuses a renewal from a version it no
// longer keeps, and every streaming list refused as unsupported; it records each
// watch's query and counts the lists of pods.
type expireFirstWatch struct {
	next    http.RoundTripper
	mu      sync.Mutex
	watches []string
	lists   int
	expired bool
}

func (e *expireFirstWatch) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	if !strings.HasSuffix(req.URL.Path, "/pods") {
		return e.next.RoundTrip(req)
	}
	if q.Get("watch") != "true" {
		e.mu.Lock()
		e.lists++
		e.mu.Unlock()
		return e.next.RoundTrip(req)
	}
	e.mu.Lock()
	e.watches = append(e.watches, req.URL.RawQuery)
	streaming := q.Get("sendInitialEvents") == "true"
	refuse := streaming || !e.expired
	e.expired = e.expired || !streaming
	e.mu.Unlock()
	if !refuse {
		return e.next.RoundTrip(req)
	}
	code, body := http.StatusGone, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version","reason":"Expired","code":410}`
	if streaming {
		// As an API server without streaming lists answers (the watch does not ask them).
		code, body = http.StatusBadRequest, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"sendInitialEvents is not supported","reason":"BadRequest","code":400}`
	}
	return &http.Response{StatusCode: code, Header: http.Header{"Content-Type": []string{"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
}

func (e *expireFirstWatch) queries() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.watches...)
}

// TestNodePodsWatchAsksNoBookmarks: on a real API server, a node's pod watch asks for no
// bookmarks (a bookmark a minute to each of 1,024 watches was most of the manager's CPU
// at rest), and a renewal the API server refuses as too old (410: without bookmarks a
// quiet node's version ages) loses nothing: the node's pods are listed again and a pod
// created meanwhile is seen. The watches here last 1-2 s: the renewals the API server
// ends resume from their version, with no list, and miss nothing either.
func TestNodePodsWatchAsksNoBookmarks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const prefix = "nbk-"
	cfg := rest.CopyConfig(operatorConfig)
	tr := &expireFirstWatch{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { tr.next = rt; return tr })
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prefix + "apps"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	node := prefix + "node-a"
	pod := func(name string) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), p, client.GracePeriodSeconds(0)) })
	}
	pod("before")
	np := newNodePods(ctx, cs)
	np.timeout = time.Second
	np.track("lab", []string{node})
	defer np.track("lab", nil)
	seen := func(want string) bool {
		for range 600 { // a guard against a hang: the watch lists again within a second
			pods, _ := np.list(node)
			for _, p := range pods {
				if p.Name == want {
					return true
				}
			}
			time.Sleep(25 * time.Millisecond)
		}
		return false
	}
	if !seen("before") {
		t.Fatal("the node's pod was never listed")
	}
	for range 600 { // at most 15 s: four watches of 1-2 s
		tr.mu.Lock()
		done := tr.expired && len(tr.watches) >= 4
		tr.mu.Unlock()
		if done {
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	pod("after")
	if !seen("after") {
		t.Fatalf("a pod created after the refused renewal is not seen (watches %v)", tr.queries())
	}
	qs := tr.queries()
	plain := 0
	for _, q := range qs {
		if strings.Contains(q, "sendInitialEvents=true") {
			continue // a streaming list needs its end-of-list bookmark
		}
		plain++
		if strings.Contains(q, "allowWatchBookmarks=true") {
			t.Errorf("a watch asks for bookmarks: %s", q)
		}
	}
	if plain < 4 {
		t.Errorf("watches %v: want the refused renewal and the renewals after it", qs)
	}
	for i, q := range qs[1:] {
		if !strings.Contains(q, "timeoutSeconds=1") && !strings.Contains(q, "timeoutSeconds=2") {
			t.Errorf("watch %d asks %s: want a timeout of 1-2 s", i+1, q)
		}
	}
	tr.mu.Lock()
	lists := tr.lists
	tr.mu.Unlock()
	if lists != 2 {
		t.Errorf("%d lists of the node's pods, want 2 (the first, and after the refused renewal): a renewal the API server ended resumes from its version", lists)
	}
}
