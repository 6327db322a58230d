package vsphere_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpupool/gpupool/vsphere"
)

const tagWorld = `
datacenter: dc1
hosts:
  - name: esx-01
    gpus:
      - {model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}
    profiles:
      - {name: grid_p100-4q, frameBufferGiB: 4}
vms:
  - {name: gpu-day-1, host: esx-01, profile: grid_p100-4q, folder: gpu/day, tags: [gpupool/day]}
  - {name: gpu-day-2, host: esx-01, profile: grid_p100-4q, tags: [gpupool/day, owner/lab-a]}
  - {name: gpu-day-3, host: esx-01, profile: grid_p100-4q}
  - {name: gpu-night-1, host: esx-01, profile: grid_p100-4q, tags: [gpupool/night, other/day]}
`

func tag(category, name string) *vsphere.Tag { return &vsphere.Tag{Category: category, Name: name} }

// TestSelectVMsByTag (issue 38, select by tag): the VMs that carry a tag, alone and with
// the other sources (every one must match); a tag of the same name in another category
// is another tag; a VM tagged or untagged later is picked up or released on the next
// read; a category or tag that does not exist, or was deleted, is an error naming it,
// never an empty selection; a tag renamed is followed by its names, not its ID.
func TestSelectVMsByTag(t *testing.T) {
	e := newEnv(t, tagWorld)
	sel := func(s vsphere.VMSelector) string {
		t.Helper()
		got, err := e.c.SelectVMs(e.ctx, s)
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		return strings.Join(got, " ")
	}
	for _, tc := range []struct {
		sel  vsphere.VMSelector
		want string
	}{
		{vsphere.VMSelector{Tag: tag("gpupool", "day")}, "gpu-day-1 gpu-day-2"},
		{vsphere.VMSelector{Tag: tag("gpupool", "night")}, "gpu-night-1"},
		{vsphere.VMSelector{Tag: tag("other", "day")}, "gpu-night-1"},
		{vsphere.VMSelector{Tag: tag("gpupool", "day"), Folder: "gpu/day"}, "gpu-day-1"},
		{vsphere.VMSelector{Tag: tag("gpupool", "day"), NamePattern: "*-2"}, "gpu-day-2"},
		{vsphere.VMSelector{Tag: tag("gpupool", "night"), NamePattern: "gpu-day-*"}, ""},
	} {
		if got := sel(tc.sel); got != tc.want {
			t.Errorf("%+v (tag %v) selects %q, want %q", tc.sel, tc.sel.Tag, got, tc.want)
		}
	}

	if err := e.sim.AttachTag("gpu-day-3", "gpupool/day"); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.DetachTag("gpu-day-1", "gpupool/day"); err != nil {
		t.Fatal(err)
	}
	if got := sel(vsphere.VMSelector{Tag: tag("gpupool", "day")}); got != "gpu-day-2 gpu-day-3" {
		t.Errorf("after tagging gpu-day-3 and untagging gpu-day-1: %q", got)
	}

	for _, tc := range []struct {
		tag  *vsphere.Tag
		want string
	}{
		{tag("gpupool", "dya"), `tag "dya" not found in category "gpupool" (its tags: day, night)`},
		{tag("gpu-pool", "day"), `tag category "gpu-pool" not found`},
		{tag("owner", "day"), `tag "day" not found in category "owner" (its tags: lab-a)`},
	} {
		got, err := e.c.SelectVMs(e.ctx, vsphere.VMSelector{Tag: tc.tag})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("tag %v selects %v (error %v), want an error saying %s: a mistyped tag must not release every node", tc.tag, got, err, tc.want)
		}
	}

	// Deleted after it was looked up, then made again (a new ID): an error while it is
	// gone, the VMs tagged with the new one afterwards.
	if err := e.sim.DeleteTag("gpupool/day"); err != nil {
		t.Fatal(err)
	}
	if got, err := e.c.SelectVMs(e.ctx, vsphere.VMSelector{Tag: tag("gpupool", "day")}); err == nil || !strings.Contains(err.Error(), `"day" not found`) {
		t.Errorf("a deleted tag selects %v (error %v), want an error", got, err)
	}
	if err := e.sim.AttachTag("gpu-day-1", "gpupool/day"); err != nil {
		t.Fatal(err)
	}
	if got := sel(vsphere.VMSelector{Tag: tag("gpupool", "day")}); got != "gpu-day-1" {
		t.Errorf("the tag made again selects %q, want gpu-day-1", got)
	}

	// Renamed after it was looked up: the old name is another tag (not found), and a
	// new tag of the old name selects its own VMs, not the renamed tag's.
	if err := e.sim.RenameTag("gpupool/day", "daytime"); err != nil {
		t.Fatal(err)
	}
	if got, err := e.c.SelectVMs(e.ctx, vsphere.VMSelector{Tag: tag("gpupool", "day")}); err == nil || !strings.Contains(err.Error(), `"day" not found`) {
		t.Errorf("a renamed tag's old name selects %v (error %v), want an error", got, err)
	}
	if err := e.sim.AttachTag("gpu-day-3", "gpupool/day"); err != nil {
		t.Fatal(err)
	}
	if got := sel(vsphere.VMSelector{Tag: tag("gpupool", "day")}); got != "gpu-day-3" {
		t.Errorf("a new tag of the renamed one's name selects %q, want gpu-day-3", got)
	}
	if got := sel(vsphere.VMSelector{Tag: tag("gpupool", "daytime")}); got != "gpu-day-1" {
		t.Errorf("the renamed tag selects %q, want gpu-day-1", got)
	}

	// A vCenter that cannot be reached is an error, never no VMs.
	e.sim.RefuseConnections()
	t.Cleanup(func() { _ = e.sim.AcceptConnections() })
	if got, err := e.c.SelectVMs(e.ctx, vsphere.VMSelector{Tag: tag("gpupool", "night")}); err == nil {
		t.Errorf("selected %v from a vCenter that refuses connections, want an error", got)
	}
}

// TestTagLoginRefused: the REST API's login, made with the SOAP session's credentials
// the first time a pool selects by tag, is refused once the password was rotated on
// vCenter. The refusal is held back as the SOAP login's is: the tag selection and every
// Connect with the same credentials fail without a login until the Secret changes, so
// that the account comes no closer to vCenter's lockout. One REST session serves every
// tag selection of the SOAP session.
func TestTagLoginRefused(t *testing.T) {
	e := newEnv(t, tagWorld)
	before := e.sim.PasswordChecks()
	for range 3 {
		if _, err := e.c.SelectVMs(e.ctx, vsphere.VMSelector{Tag: tag("gpupool", "day")}); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.sim.PasswordChecks() - before; n != 1 {
		t.Errorf("three tag selections logged in %d times, want once (one REST session)", n)
	}

	e2 := newEnv(t, tagWorld)
	const canary = "rotated-Passw0rd!"
	e2.sim.SetPassword(canary)
	before = e2.sim.PasswordChecks()
	_, err := e2.c.SelectVMs(e2.ctx, vsphere.VMSelector{Tag: tag("gpupool", "day")})
	var refused *vsphere.LoginRefusedError
	if !errors.As(err, &refused) {
		t.Fatalf("a tag selection whose REST login is refused: want a *LoginRefusedError, got %v", err)
	}
	for i := range 20 {
		if _, err := e2.c.SelectVMs(e2.ctx, vsphere.VMSelector{Tag: tag("gpupool", "day")}); err == nil {
			t.Fatalf("selection %d after the refusal worked", i)
		}
		if _, err := e2.conn.Connect(e2.ctx, e2.config()); !errors.Is(err, vsphere.ErrInvalidLogin) {
			t.Fatalf("connect %d with the refused password: want ErrInvalidLogin, got %v", i, err)
		}
	}
	if n := e2.sim.PasswordChecks() - before; n != 1 {
		t.Errorf("after the rotation: %d logins checked, want 1", n)
	}
	if strings.Contains(err.Error(), e2.sim.Password) || strings.Contains(err.Error(), canary) {
		t.Errorf("the error shows a password: %v", err)
	}
	cfg := e2.config()
	cfg.Password, cfg.CredentialsVersion = canary, "2"
	c, err := e2.conn.Connect(e2.ctx, cfg)
	if err != nil {
		t.Fatalf("the updated Secret: %v", err)
	}
	if got, err := c.SelectVMs(e2.ctx, vsphere.VMSelector{Tag: tag("gpupool", "night")}); err != nil || strings.Join(got, " ") != "gpu-night-1" {
		t.Fatalf("with the updated Secret: %v, %v", got, err)
	}
}
