package main

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// errPoolDeleted ends a watch whose pool was deleted.
var errPoolDeleted = errors.New("the pool was deleted")

// watchPool calls each with the pool as it is now and after every change, until each
// says done, fails, or ctx ends (then ctx's error). The API server ends watches after a
// while (and may answer 410 Gone): the pool is then read again and watched from there,
// so no change is missed and none is waited for forever.
func (a *app) watchPool(ctx context.Context, name string, each func(*gpupoolv1.GPUPoolProfile) (bool, error)) error {
	c, err := a.watchClient()
	if err != nil {
		return err
	}
	for {
		var p gpupoolv1.GPUPoolProfile
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
			return firstErr(ctx.Err(), err)
		}
		if done, err := a.seen(each, &p); done || err != nil {
			return err
		}
		w, err := c.Watch(ctx, &gpupoolv1.GPUPoolProfileList{}, &client.ListOptions{Raw: &metav1.ListOptions{
			FieldSelector: "metadata.name=" + name, ResourceVersion: p.ResourceVersion, AllowWatchBookmarks: true,
		}})
		if err != nil {
			return firstErr(ctx.Err(), err)
		}
		done, err := a.follow(ctx, w, each)
		w.Stop()
		if done || err != nil {
			return err
		}
	}
}

// watchClient is a client that can watch, for the current kubeconfig, context and user.
func (a *app) watchClient() (client.WithWatch, error) {
	cfg, err := a.config.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	return client.NewWithWatch(cfg, client.Options{Scheme: a.scheme})
}

// follow hands each change of one watch to each; it reports false with no error when the
// watch ended and must be made again.
func (a *app) follow(ctx context.Context, w watch.Interface, each func(*gpupoolv1.GPUPoolProfile) (bool, error)) (bool, error) {
	for {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false, nil
			}
			switch ev.Type {
			case watch.Deleted:
				return true, errPoolDeleted
			case watch.Error:
				return false, nil // such as 410 Gone: read again
			case watch.Added, watch.Modified:
				p, ok := ev.Object.(*gpupoolv1.GPUPoolProfile)
				if !ok {
					return false, nil
				}
				if done, err := a.seen(each, p); done || err != nil {
					return true, err
				}
			}
		}
	}
}

// seen hands a pool to each and then to the test hook.
func (a *app) seen(each func(*gpupoolv1.GPUPoolProfile) (bool, error), p *gpupoolv1.GPUPoolProfile) (bool, error) {
	done, err := each(p)
	if a.watched != nil {
		a.watched(p)
	}
	return done, err
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// waitTarget says whether a pool has reached layout after a switch: the layout is
// active, no transition runs, and Ready is True for the pool's current spec (status and
// condition observedGeneration equal to metadata.generation, so the Ready of the spec
// before the switch does not count). A pool stalled or paused for that spec will not get
// there without a person: that is an error, which says why.
func waitTarget(p *gpupoolv1.GPUPoolProfile, layout string) (bool, error) {
	st := &p.Status
	current := func(c *metav1.Condition) bool {
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == p.Generation
	}
	if st.ObservedGeneration != p.Generation {
		return false, nil
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, gpupoolv1.ConditionStalled); current(c) {
		return true, fmt.Errorf("pool %s is stalled (%s): %s", p.Name, c.Reason, c.Message)
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, gpupoolv1.ConditionPaused); current(c) {
		return true, fmt.Errorf("pool %s is paused: nothing changes until kubectl gpupool unpause %s", p.Name, p.Name)
	}
	return st.ActiveLayout == layout && st.Transition == nil && current(meta.FindStatusCondition(p.Status.Conditions, gpupoolv1.ConditionReady)), nil
}
