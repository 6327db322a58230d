package vgpusim_test

import (
	"strings"
	"testing"

	"github.com/gpupool/gpupool/test/vgpusim"
)

// TestGovcTags checks vgpusim's tags with the real govc commands, which speak vCenter's
// REST API: the inventory's tags are what govc lists, a tag govc attaches is one
// AttachTag would have made (the same category and tag, no second one), and DetachTag
// takes off a tag govc attached.
func TestGovcTags(t *testing.T) {
	govc := buildGovc(t)
	inv, err := vgpusim.Load([]byte(`
datacenter: dc1
hosts:
  - name: esx-01
    gpus: [{model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}]
    profiles: [{name: grid_p100-4q, frameBufferGiB: 4}]
vms:
  - {name: gpu-day-1, host: esx-01, profile: grid_p100-4q, tags: [gpupool/day]}
  - {name: gpu-day-2, host: esx-01, profile: grid_p100-4q, tags: [gpupool/day, owner/lab-a]}
  - {name: gpu-day-3, host: esx-01, profile: grid_p100-4q}
`))
	if err != nil {
		t.Fatal(err)
	}
	sim := vgpusim.StartInventoryT(t, inv, vgpusim.Options{})
	_, ok := govcRunner(t, govc, sim)

	contains(t, ok("tags.category.ls"), "gpupool", "owner")
	contains(t, ok("tags.ls", "-c", "gpupool"), "day")
	attached := func(vm string) string {
		return ok("tags.attached.ls", "-r", "/dc1/vm/"+vm)
	}
	contains(t, attached("gpu-day-2"), "day", "lab-a")
	if out := attached("gpu-day-3"); strings.Contains(out, "day") {
		t.Fatalf("gpu-day-3 carries no tag, govc lists %q", out)
	}

	ok("tags.attach", "-c", "gpupool", "day", "/dc1/vm/gpu-day-3")
	contains(t, attached("gpu-day-3"), "day")
	if err := sim.AttachTag("gpu-day-3", "gpupool/night"); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(ok("tags.ls", "-c", "gpupool"), "day"); n != 1 {
		t.Errorf("category gpupool lists day %d times, want once", n)
	}
	if err := sim.DetachTag("gpu-day-3", "gpupool/day"); err != nil {
		t.Fatal(err)
	}
	if out := attached("gpu-day-3"); strings.Contains(out, "day") || !strings.Contains(out, "night") {
		t.Errorf("after DetachTag of a tag govc attached, gpu-day-3 carries %q, want night only", out)
	}
	if _, err := vgpusim.Load([]byte(strings.Replace(`
datacenter: dc1
hosts: [{name: esx-01, gpus: [{model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}], profiles: [{name: grid_p100-4q, frameBufferGiB: 4}]}]
vms: [{name: v, host: esx-01, profile: grid_p100-4q, tags: [TAG]}]
`, "TAG", "day", 1))); err == nil || !strings.Contains(err.Error(), "tags[0]") {
		t.Errorf("a tag without its category loads (error %v), want an error naming tags[0]", err)
	}
}
