package vsphere

import (
	"context"
	"testing"
	"time"

	"github.com/gpupool/gpupool/test/vgpusim"
)

// TestRESTSessionLoggedOut: Close logs the REST session out on vCenter (each session
// takes one of vCenter's limited number), and one that vCenter ended meanwhile is logged
// in again once, not reported as an error.
func TestRESTSessionLoggedOut(t *testing.T) {
	inv, err := vgpusim.Load([]byte(`
datacenter: dc1
hosts:
  - name: esx-01
    gpus: [{model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}]
    profiles: [{name: grid_p100-4q, frameBufferGiB: 4}]
vms:
  - {name: gpu-day-1, host: esx-01, profile: grid_p100-4q, tags: [gpupool/day]}
  - {name: gpu-night-1, host: esx-01, profile: grid_p100-4q, tags: [gpupool/night]}
`))
	if err != nil {
		t.Fatal(err)
	}
	sim := vgpusim.StartInventoryT(t, inv, vgpusim.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := NewConnector()
	c, err := conn.Connect(ctx, Config{Server: sim.URL.Host, Datacenter: sim.Datacenter(),
		Username: sim.Username, Password: sim.Password, Thumbprint: sim.ThumbprintSHA256()})
	if err != nil {
		t.Fatal(err)
	}
	day := VMSelector{Tag: &Tag{Category: "gpupool", Name: "day"}}
	if got, err := c.SelectVMs(ctx, day); err != nil || len(got) != 1 {
		t.Fatalf("select: %v, %v", got, err)
	}
	r := c.(*client).s.rest
	first := r.client
	if s, err := first.Session(ctx); err != nil || s == nil {
		t.Fatalf("the REST session is not logged in: %v, %v", s, err)
	}

	// vCenter ends the session (an idle timeout): the next selection logs in again.
	if err := first.Logout(ctx); err != nil {
		t.Fatal(err)
	}
	checks := sim.PasswordChecks()
	if got, err := c.SelectVMs(ctx, day); err != nil || len(got) != 1 {
		t.Fatalf("select after vCenter ended the REST session: %v, %v", got, err)
	}
	if n := sim.PasswordChecks() - checks; n != 1 || r.client == first {
		t.Errorf("after vCenter ended the REST session: %d logins, a new session %v; want one login and a new session", n, r.client != first)
	}

	// Ended again, and the next call a lookup (a tag not looked up yet): logged in again
	// too, not failing on every pass with the dead session.
	if err := r.client.Logout(ctx); err != nil {
		t.Fatal(err)
	}
	checks = sim.PasswordChecks()
	if got, err := c.SelectVMs(ctx, VMSelector{Tag: &Tag{Category: "gpupool", Name: "night"}}); err != nil || len(got) != 1 {
		t.Fatalf("a first lookup after vCenter ended the REST session: %v, %v", got, err)
	}
	if n := sim.PasswordChecks() - checks; n != 1 {
		t.Errorf("a lookup after vCenter ended the REST session: %d logins, want one", n)
	}

	second := r.client
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := second.Session(ctx); err != nil || s != nil {
		t.Errorf("after Close the REST session is still logged in on vCenter: %+v, %v", s, err)
	}
	if _, err := c.SelectVMs(ctx, day); err == nil {
		t.Error("a Client of a closed cache selected VMs by tag")
	}
}
