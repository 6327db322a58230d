package vsphere

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/vmware/govmomi/vim25/types"
)

// VMSelector says which VMs of the datacenter SelectVMs lists: those that match every
// field set (none set: every VM).
type VMSelector struct {
	// NamePattern is a glob on the VM's name (path.Match: *, ?, [a-z]).
	NamePattern string
	// Folder is a folder of the datacenter's vm folder, relative to it (gpu/day) or as
	// an inventory path (/dc1/vm/gpu/day); its subfolders are included.
	Folder string
	// Tag, when set, selects the VMs that carry it (tags.go: vCenter's REST API).
	Tag *Tag
}

// SelectVMs lists the names of the datacenter's VMs that sel matches, sorted, in one
// RetrieveProperties of the VMs' and folders' names and parents (a scoped read's
// listing without hosts). A name two VMs share is listed once as each VM's inventory
// path, so that the caller never picks the wrong one of them. An error is never an
// empty list, and a folder, tag category or tag that does not exist is an error. A tag
// takes the REST API's list of the tag's objects besides (tags.go).
func (c *client) SelectVMs(ctx context.Context, sel VMSelector) ([]string, error) {
	if sel.NamePattern != "" {
		if _, err := path.Match(sel.NamePattern, ""); err != nil {
			return nil, fmt.Errorf("vsphere: name pattern %q: %w", sel.NamePattern, err)
		}
	}
	var tagged map[string]bool
	if sel.Tag != nil {
		var err error
		if tagged, err = c.s.rest.taggedVMs(ctx, *sel.Tag); err != nil {
			return nil, err
		}
	}
	spec := inventorySpec(c.dc.ref)
	spec.PropSet = []types.PropertySpec{
		{Type: "VirtualMachine", PathSet: []string{"name", "parent"}},
		{Type: "Folder", PathSet: folderProps},
	}
	content, err := c.retrieve(ctx, spec)
	if err != nil {
		return nil, err
	}
	o, err := decodeInventory(content)
	if err != nil {
		return nil, err
	}
	paths := folderPaths(c.dc, o.folders)
	dcPath := c.dc.path
	if dcPath == "" {
		dcPath = "/" + c.dc.name
	}
	folder := ""
	if f := strings.Trim(sel.Folder, "/"); f != "" {
		folder = path.Join(dcPath, "vm", f)
		if strings.HasPrefix(sel.Folder, "/") {
			folder = path.Clean(sel.Folder)
		}
	}
	if folder != "" && !slices.Contains(slices.Collect(maps.Values(paths)), folder) {
		// A folder renamed or mistyped is no empty selection, which would release every
		// node the selection held.
		return nil, fmt.Errorf("vsphere: folder %s not found in datacenter %s", folder, c.dc.name)
	}
	type match struct{ name, path string }
	var found []match
	count := map[string]int{}
	for _, vm := range o.vms {
		count[vm.Name]++
		if sel.NamePattern != "" {
			if ok, _ := path.Match(sel.NamePattern, vm.Name); !ok {
				continue
			}
		}
		if tagged != nil && !tagged[vm.Self.Value] {
			continue
		}
		p := ""
		if vm.Parent != nil {
			if fp, ok := paths[*vm.Parent]; ok {
				p = path.Join(fp, vm.Name)
			}
		}
		if folder != "" && (p == "" || !strings.HasPrefix(p, folder+"/")) {
			continue
		}
		found = append(found, match{vm.Name, p})
	}
	out := make([]string, 0, len(found))
	for _, m := range found {
		if count[m.name] > 1 && m.path != "" {
			out = append(out, m.path)
			continue
		}
		out = append(out, m.name)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
