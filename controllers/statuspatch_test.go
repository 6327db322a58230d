package controllers

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/randfill"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestStatusPatchTurnsFromIntoTo covers the class of status changes a pass makes: for
// pairs of statuses, random and derived from each other field by field (a field kept,
// emptied, filled anew, or, inside an object, one of its fields changed), the patch
// applied to the stored pool gives the new status exactly, fields the new status omits
// removed; it is nothing when the statuses are equal, carries the resourceVersion read
// when locked, and leaves the pool's other parts alone (what the API server would do
// with client.MergeFrom's patch, checked against it).
func TestStatusPatchTurnsFromIntoTo(t *testing.T) {
	fill := randfill.NewWithSeed(7).NilChance(0.3).NumElements(0, 3)
	rng := rand.New(rand.NewPCG(7, 37))
	for i := range 400 {
		from := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: "41"}}
		fill.Fill(&from.Status)
		to := from.DeepCopy()
		mutate(rng, fill, reflect.ValueOf(&to.Status).Elem(), 0)
		if i%10 == 0 {
			to.Status = gpupoolv1.GPUPoolProfileStatus{} // everything emptied
		}
		lock := i%2 == 0
		data, err := poolStatusPatch(from, lock).Data(to)
		if err != nil {
			t.Fatalf("pair %d: %v", i, err)
		}
		stored := mustJSON(t, from)
		got, err := jsonpatch.MergePatch(stored, data)
		if err != nil {
			t.Fatalf("pair %d: applying %s: %v", i, data, err)
		}
		if !sameJSON(t, got, mustJSON(t, to)) {
			t.Fatalf("pair %d: the patch %s turns\n%s\ninto\n%s\nwant\n%s", i, data, stored, got, mustJSON(t, to))
		}
		// client.MergeFrom's patch, applied, gives the same pool.
		theirs, err := client.MergeFrom(from).Data(to)
		if err != nil {
			t.Fatal(err)
		}
		if want, err := jsonpatch.MergePatch(stored, theirs); err != nil || !sameJSON(t, got, want) {
			t.Fatalf("pair %d: ours gives %s, client.MergeFrom's %s (%v)", i, got, want, err)
		}
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		if rv := string(doc["metadata"]); lock != (rv == `{"resourceVersion":"41"}`) || (!lock && rv != "") {
			t.Errorf("pair %d (lock %v): metadata %s", i, lock, rv)
		}
		for k := range doc {
			if k != "metadata" && k != "status" {
				t.Errorf("pair %d: the patch writes %s", i, k)
			}
		}
		same, err := poolStatusPatch(from, false).Data(from.DeepCopy())
		if err != nil || string(same) != "{}" {
			t.Errorf("pair %d: the patch of an unchanged status is %s, %v; want {}", i, same, err)
		}
	}
}

// TestStatusPatchRefusesWhatItCannotLock: a locked patch without the resourceVersion
// read would overwrite whatever is stored; a patch of another kind is a bug.
func TestStatusPatchRefusesWhatItCannotLock(t *testing.T) {
	from := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	if _, err := poolStatusPatch(from, true).Data(from.DeepCopy()); err == nil || !strings.Contains(err.Error(), "resourceVersion") {
		t.Errorf("locked without a resourceVersion: %v", err)
	}
	if _, err := poolStatusPatch(from, false).Data(&gpupoolv1.GPUPoolRequest{}); err == nil {
		t.Error("a pool's patch of a request: no error")
	}
}

// mutate changes v at random, as a pass does: each field of a struct is kept, emptied,
// filled anew, or (an object) changed inside.
func mutate(rng *rand.Rand, fill *randfill.Filler, v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() && depth < 3 {
			mutate(rng, fill, v.Elem(), depth+1)
			return
		}
	case reflect.Struct:
		if depth < 3 && v.Type() != reflect.TypeFor[metav1.Time]() {
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					mutateField(rng, fill, v.Field(i), depth)
				}
			}
			return
		}
	}
	fill.Fill(v.Addr().Interface())
}

func mutateField(rng *rand.Rand, fill *randfill.Filler, f reflect.Value, depth int) {
	switch rng.IntN(4) {
	case 0: // kept
	case 1:
		f.SetZero()
	case 2:
		fill.Fill(f.Addr().Interface())
	default:
		mutate(rng, fill, f, depth+1)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameJSON compares two documents as the API server decodes them: key order aside, and
// a member that is null as one that is absent (a merge patch cannot tell them apart).
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(dropNulls(x), dropNulls(y))
}

func dropNulls(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if e == nil {
				delete(v, k)
				continue
			}
			v[k] = dropNulls(e)
		}
	case []any:
		for i, e := range v {
			v[i] = dropNulls(e)
		}
	}
	return v
}

// BenchmarkStatusPatch: a pass's status write at 64 hosts (1,280 workers, a 570 KB
// status), one worker's step changed, made by statusPatch and by client.MergeFrom.
func BenchmarkStatusPatch(b *testing.B) {
	from := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: "41"}}
	at := metav1.NewTime(time.Date(2026, 12, 7, 7, 0, 0, 0, time.UTC))
	for i := range 1280 {
		from.Status.Workers = append(from.Status.Workers, gpupoolv1.WorkerStatus{
			VM: fmt.Sprintf("gpu-host-%02d-vm-%02d", i/20, i%20), Node: fmt.Sprintf("gpu-host-%02d-vm-%02d", i/20, i%20),
			Host: fmt.Sprintf("esx-%02d", i/20), GPU: "0000:3b:00.0", Profile: "grid_a100-4c", PowerState: "poweredOn",
			Step: gpupoolv1.StepDrainRequired, Message: "drain: 3 pod(s) left, evicting", StepStartTime: &at,
			Task: &gpupoolv1.TaskReference{ID: fmt.Sprintf("task-%d", i), Operation: "Suspend", StartTime: at},
		})
	}
	to := from.DeepCopy()
	to.Status.Workers[7].Step = gpupoolv1.StepParkRequired
	for _, c := range []struct {
		name  string
		patch client.Patch
	}{{"statusPatch", poolStatusPatch(from, true)}, {"MergeFrom", client.MergeFromWithOptions(from, client.MergeFromWithOptimisticLock{})}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.patch.Data(to); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
