package main

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// patchSpec merge-patches spec fields on the resourceVersion the command read, so that a
// spec change made meanwhile (another switch) fails the patch instead of being
// overwritten. The operator writes the pool's status all through a transition and each
// write changes the resourceVersion too: on a conflict the pool is read again and, when
// its spec is the one the command decided on (same generation), the same change is
// applied on the new resourceVersion, a bounded number of times (retry.DefaultRetry, as
// kubectl does). When the spec changed, it refuses and says what changed.
func patchSpec(ctx context.Context, c client.Client, p *gpupoolv1.GPUPoolProfile, spec map[string]any) error {
	read := p.DeepCopy() // the pool the command decided on
	attempt := 0
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		attempt++
		if attempt > 1 {
			var now gpupoolv1.GPUPoolProfile
			if err := c.Get(ctx, client.ObjectKeyFromObject(p), &now); err != nil {
				return err
			}
			if changed := specChange(read, &now); changed != "" {
				return fmt.Errorf("pool %s: %s since the command read it; run it again", p.Name, changed)
			}
			now.DeepCopyInto(p)
		}
		return patchOnce(ctx, c, p, spec)
	})
	if apierrors.IsConflict(err) {
		return fmt.Errorf("patching pool %s: it kept changing over %d attempts; run it again: %w", p.Name, attempt, err)
	}
	return err
}

func patchOnce(ctx context.Context, c client.Client, p *gpupoolv1.GPUPoolProfile, spec map[string]any) error {
	data, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": p.ResourceVersion},
		"spec":     spec,
	})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, p, client.RawPatch(types.MergePatchType, data)); err != nil {
		if apierrors.IsConflict(err) {
			return err // retried by patchSpec, which words the final error
		}
		return fmt.Errorf("patching pool %s: %w", p.Name, err)
	}
	return nil
}

// specChange says how the pool's spec changed between two reads, naming the fields the
// verbs read (the override, paused), or "" when it did not change. The generation counts
// spec changes only: status writes and metadata (labels, annotations) leave it.
func specChange(before, after *gpupoolv1.GPUPoolProfile) string {
	if before.Generation == after.Generation {
		return ""
	}
	if a, b := overrideText(before.Spec.Override), overrideText(after.Spec.Override); a != b {
		return fmt.Sprintf("spec.override changed from %s to %s", a, b)
	}
	if before.Spec.Paused != after.Spec.Paused {
		return fmt.Sprintf("spec.paused changed from %t to %t", before.Spec.Paused, after.Spec.Paused)
	}
	return fmt.Sprintf("its spec changed (generation %d to %d)", before.Generation, after.Generation)
}

func overrideText(o *gpupoolv1.Override) string {
	if o == nil {
		return "none"
	}
	s := o.Layout
	if o.Until != nil {
		s += " until " + o.Until.UTC().Format("2006-01-02T15:04:05Z")
	}
	if o.Reason != "" {
		s += fmt.Sprintf(" (%q)", o.Reason)
	}
	return s
}
