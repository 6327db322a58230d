package vgpusim

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/vmware/govmomi/vapi/rest"
	// vcsim's vAPI simulator serves vCenter's REST API (tags among it) beside the SOAP
	// API, on the same address, checking logins with the simulator's credentials.
	_ "github.com/vmware/govmomi/vapi/simulator"
	"github.com/vmware/govmomi/vapi/tags"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// Tags are vCenter's REST API's, as on a real vCenter: the inventory's VM tags are
// attached when the simulator starts, and AttachTag and DetachTag change them later,
// through the same REST calls a vSphere client (or govc tags.attach) makes.

// splitTag splits "category/name".
func splitTag(tag string) (category, name string, err error) {
	category, name, ok := strings.Cut(tag, "/")
	if !ok || category == "" || name == "" {
		return "", "", fmt.Errorf("tag %q is not category/name", tag)
	}
	return category, name, nil
}

// tagManager logs in to the REST API as the simulator's user, on the server itself (not
// through the gate, which may be refusing connections), with the password accepted now.
func (s *Sim) tagManager(ctx context.Context) (*tags.Manager, func(), error) {
	u := *s.server.URL
	u.User = nil
	sc := soap.NewClient(&u, true)
	vc, err := vim25.NewClient(ctx, sc)
	if err != nil {
		return nil, nil, err
	}
	s.ctl.mu.Lock()
	password := s.Password
	if s.ctl.password != "" {
		password = s.ctl.password
	}
	s.ctl.mu.Unlock()
	rc := rest.NewClient(vc)
	if err := rc.Login(ctx, url.UserPassword(s.Username, password)); err != nil {
		return nil, nil, fmt.Errorf("vgpusim: log in to the REST API: %w", err)
	}
	return tags.NewManager(rc), func() { _ = rc.Logout(ctx) }, nil
}

// ensureTag returns the ID of category/name, creating the category (many cardinality,
// for VMs) and the tag when missing.
func ensureTag(ctx context.Context, m *tags.Manager, category, name string) (string, error) {
	cats, err := m.GetCategories(ctx)
	if err != nil {
		return "", err
	}
	catID := ""
	for _, c := range cats {
		if c.Name == category {
			catID = c.ID
		}
	}
	if catID == "" {
		if catID, err = m.CreateCategory(ctx, &tags.Category{Name: category, Cardinality: "MULTIPLE",
			AssociableTypes: []string{"VirtualMachine"}}); err != nil {
			return "", fmt.Errorf("create tag category %s: %w", category, err)
		}
	}
	ts, err := m.GetTagsForCategory(ctx, catID)
	if err != nil {
		return "", err
	}
	for _, t := range ts {
		if t.Name == name {
			return t.ID, nil
		}
	}
	id, err := m.CreateTag(ctx, &tags.Tag{Name: name, CategoryID: catID})
	if err != nil {
		return "", fmt.Errorf("create tag %s/%s: %w", category, name, err)
	}
	return id, nil
}

// AttachTag attaches the tag category/name to the named VM, creating the category and
// the tag when they do not exist, as an administrator tagging a VM does.
func (s *Sim) AttachTag(vm, tag string) error {
	return s.tagVM(vm, tag, true)
}

// DetachTag takes the tag category/name off the named VM.
func (s *Sim) DetachTag(vm, tag string) error {
	return s.tagVM(vm, tag, false)
}

func (s *Sim) tagVM(vm, tag string, attach bool) error {
	ctx := context.Background()
	m, logout, err := s.tagManager(ctx)
	if err != nil {
		return err
	}
	defer logout()
	return s.tagVMWith(ctx, m, vm, tag, attach)
}

func (s *Sim) tagVMWith(ctx context.Context, m *tags.Manager, vm, tag string, attach bool) error {
	category, name, err := splitTag(tag)
	if err != nil {
		return fmt.Errorf("vgpusim: %w", err)
	}
	ref, ok := s.VMRef(vm)
	if !ok {
		return fmt.Errorf("vgpusim: no VM %s", vm)
	}
	id, err := ensureTag(ctx, m, category, name)
	if err != nil {
		return fmt.Errorf("vgpusim: %w", err)
	}
	obj := types.ManagedObjectReference{Type: "VirtualMachine", Value: ref}
	if attach {
		err = m.AttachTag(ctx, id, obj)
	} else {
		err = m.DetachTag(ctx, id, obj)
	}
	if err != nil {
		return fmt.Errorf("vgpusim: tag %s on VM %s: %w", tag, vm, err)
	}
	return nil
}

// attachInventoryTags attaches the inventory's VM tags, once the REST API is served.
func (s *Sim) attachInventoryTags() error {
	tagged := false
	for _, v := range s.inv.VMs {
		tagged = tagged || len(v.Tags) > 0
	}
	if !tagged {
		return nil
	}
	ctx := context.Background()
	m, logout, err := s.tagManager(ctx)
	if err != nil {
		return err
	}
	defer logout()
	for _, v := range s.inv.VMs {
		for _, t := range v.Tags {
			if err := s.tagVMWith(ctx, m, v.Name, t, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// DeleteTag deletes the tag category/name (its attachments go with it), as an
// administrator deleting it in vCenter does.
func (s *Sim) DeleteTag(tag string) error {
	return s.withTag(tag, func(ctx context.Context, m *tags.Manager, t *tags.Tag) error {
		return m.DeleteTag(ctx, t)
	})
}

// RenameTag renames the tag category/name to category/newName, as an administrator
// renaming it in vCenter does: its ID and attachments stay.
func (s *Sim) RenameTag(tag, newName string) error {
	return s.withTag(tag, func(ctx context.Context, m *tags.Manager, t *tags.Tag) error {
		t.Name = newName
		return m.UpdateTag(ctx, t)
	})
}

// withTag finds the existing tag category/name and hands it to change.
func (s *Sim) withTag(tag string, change func(context.Context, *tags.Manager, *tags.Tag) error) error {
	category, name, err := splitTag(tag)
	if err != nil {
		return fmt.Errorf("vgpusim: %w", err)
	}
	ctx := context.Background()
	m, logout, err := s.tagManager(ctx)
	if err != nil {
		return err
	}
	defer logout()
	t, err := m.GetTagForCategory(ctx, name, category)
	if err != nil {
		return fmt.Errorf("vgpusim: %w", err)
	}
	if err := change(ctx, m, t); err != nil {
		return fmt.Errorf("vgpusim: tag %s: %w", tag, err)
	}
	return nil
}
