package controllers

import (
	"context"
	"sync"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/testworld"
)

// TestEvictionsBehindThePass: the one-host world (four day nodes with a pod each)
// switches to night with the drains' evictions inside the pass (the tests' reconciler)
// and past it (execute.Evictions, as the manager runs them; the test waits for the
// rounds between passes, as the rounds' wake-ups would): both reach night the same way,
// and each pod's eviction is asked for once.
func TestEvictionsBehindThePass(t *testing.T) {
	for _, behind := range []bool{false, true} {
		name := map[bool]string{false: "in the pass", true: "behind the pass"}[behind]
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, map[bool]string{false: "evp-", true: "evb-"}[behind])
			var mu sync.Mutex
			evictions := map[string]int{}
			h.client = func(c client.WithWatch) client.Client {
				return interceptor.NewClient(c, interceptor.Funcs{
					SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
						if sub == "eviction" {
							mu.Lock()
							evictions[obj.GetName()]++
							mu.Unlock()
						}
						return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
					},
				})
			}
			var rounds *execute.Evictions
			if behind {
				rounds = execute.NewEvictions(h.ctx, nil)
				h.reconciler().evictions = rounds
			}
			pool := h.dayNight()
			h.clock.SetTime(monday1000)
			h.create(pool)
			pods := []string{"infer-1", "infer-2", "infer-3", "infer-4"}
			for i, p := range pods {
				h.addPod(p, h.prefix+"day-"+string(rune('1'+i)), map[string]string{"app": "infer"})
			}
			h.converge(pool.Name, "day", 30)
			h.clock.SetTime(monday1950)
			reached := false
			for range 60 {
				res := h.reconcile(pool.Name)
				if rounds != nil {
					rounds.Wait()
				}
				h.settle()
				if testworld.Reached(h.get(pool.Name), "night") {
					reached = true
					break
				}
				h.clock.Step(testworld.Step(res))
			}
			if !reached {
				t.Fatalf("pool did not reach night: %s", testworld.Conditions(h.get(pool.Name)))
			}
			h.checkNight(h.get(pool.Name))
			mu.Lock()
			defer mu.Unlock()
			for _, p := range pods {
				if evictions[p] != 1 {
					t.Errorf("pod %s: %d evictions asked, want 1 (all: %v)", p, evictions[p], evictions)
				}
			}
			if rounds != nil && rounds.InFlight(pool.Name) > len(pods) {
				t.Errorf("%d rounds recorded, want at most one per drained node", rounds.InFlight(pool.Name))
			}
		})
	}
}
