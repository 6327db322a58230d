package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gpupool/gpupool/internal/testworld"
)

// nodeWriteLog counts the reconciler's writes of each node (patches and updates, as the
// API server receives them) and keeps what each patch carried, for the test's log.
type nodeWriteLog struct {
	mu      sync.Mutex
	writes  map[string]int
	patches map[string][]string
}

func (l *nodeWriteLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes, l.patches = map[string]int{}, map[string][]string{}
}

func (l *nodeWriteLog) add(obj client.Object, what string) {
	if _, isNode := obj.(*corev1.Node); !isNode {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes[obj.GetName()]++
	l.patches[obj.GetName()] = append(l.patches[obj.GetName()], what)
}

// wrap counts the node writes made through c.
func (l *nodeWriteLog) wrap(c client.WithWatch) client.Client {
	return interceptor.NewClient(c, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			data, _ := patch.Data(obj)
			l.add(obj, string(data))
			return c.Patch(ctx, obj, patch, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			l.add(obj, "update")
			return c.Update(ctx, obj, opts...)
		},
	})
}

func (l *nodeWriteLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := make([]string, 0, len(l.writes))
	for n := range l.writes {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s: %d\n", n, l.writes[n])
		for _, p := range l.patches[n] {
			fmt.Fprintf(&b, "    %s\n", p)
		}
	}
	return b.String()
}

// TestDayNightDayNodeWrites counts the node writes of a day -> night -> day cycle of the
// one-host world (four day VMs with a pod each, one night VM) on the API server, from
// the first pass of the switch to night to the pool Steady by day again, and a few
// quiet passes after it.
func TestDayNightDayNodeWrites(t *testing.T) {
	h := newHarness(t, "nwr-")
	log := &nodeWriteLog{}
	log.reset()
	h.client = log.wrap
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	for i := 1; i <= 4; i++ {
		h.addPod("infer-"+string(rune('0'+i)), h.prefix+"day-"+string(rune('0'+i)), map[string]string{"app": "infer"})
	}
	h.converge(pool.Name, "day", 30)
	h.passes(pool.Name, 3, testworld.MaxStep)

	log.reset()
	h.clock.SetTime(monday1950)
	h.checkNight(h.converge(pool.Name, "night", 60))
	h.passes(pool.Name, 3, testworld.MaxStep)
	h.clock.SetTime(tuesday0750)
	h.checkDay(h.converge(pool.Name, "day", 60))
	h.passes(pool.Name, 3, testworld.MaxStep)

	t.Logf("node writes, day -> night -> day:\n%s", log)
	const maxPerNode = 7 // TODO
	for n, w := range log.writes {
		if w > maxPerNode {
			t.Errorf("node %s written %d times, want at most %d", n, w, maxPerNode)
		}
	}
}
