package vsphere

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/vmware/govmomi/vapi/rest"
	"github.com/vmware/govmomi/vapi/tags"
)

// Tags live in vCenter's REST API (vAPI), not in the SOAP API the rest of this package
// speaks. A session of the REST API is opened with the SOAP session's credentials the
// first time a pool selects by tag, kept with the SOAP session (one per vCenter and
// user, as that one), and logged out with it. vCenter before 8.0U3 does not take the
// SOAP session's cookie there, so a second login is the one way that works everywhere.
// Its refusal is a refusal like the SOAP login's: remembered, held back for the
// back-off, and the SOAP session dropped, so that no pass logs in with a password
// vCenter refused.

// Tag names a vSphere tag by its category's name and its own.
type Tag struct {
	Category string
	Name     string
}

func (t Tag) String() string { return t.Category + "/" + t.Name }

// restSession is a SOAP session's companion in the REST API.
type restSession struct {
	// login opens a REST session with the SOAP session's credentials; the password lives
	// only in this closure. A refusal comes back as ErrInvalidLogin.
	login func(context.Context) (*rest.Client, error)
	// refused records a refusal and drops the SOAP session; it returns the error to report.
	refused func() error

	mu     sync.Mutex
	client *rest.Client
	// tagIDs are the tags looked up (category/name -> IDs): finding a tag by name takes
	// a call per category and per tag of its category, checking a known one two.
	tagIDs map[Tag]tagRef
	// closed is why no call logs in any more: ErrClosed, or the login's refusal.
	closed error
}

// errRESTExpired marks a call vCenter answered with 401: it no longer knows the session.
var errRESTExpired = errors.New("vCenter ended the REST session")

// restErr marks err as errRESTExpired when it is a 401 (rest.IsStatusError does not
// look through wrapping, so this is done where the call returns).
func restErr(err error) error {
	if rest.IsStatusError(err, http.StatusUnauthorized) {
		return fmt.Errorf("%w: %w", errRESTExpired, err)
	}
	return err
}

// isRESTRefusal tells whether a REST login was refused for its credentials.
func isRESTRefusal(err error) bool {
	return rest.IsStatusError(err, http.StatusUnauthorized) || rest.IsStatusError(err, http.StatusForbidden)
}

// session returns the REST client, logging in the first time. Callers that wait for a
// login that vCenter refuses get the refusal too, and no login of their own.
func (r *restSession) session(ctx context.Context) (*rest.Client, error) {
	r.mu.Lock()
	if r.closed != nil {
		defer r.mu.Unlock()
		return nil, r.closed
	}
	if r.client != nil {
		defer r.mu.Unlock()
		return r.client, nil
	}
	c, err := r.login(ctx)
	if errors.Is(err, ErrInvalidLogin) {
		// refused drops the SOAP session, whose close closes this one: not under r.mu.
		r.closed = ErrInvalidLogin
		r.mu.Unlock()
		err := r.refused()
		r.mu.Lock()
		r.closed = err
		r.mu.Unlock()
		return nil, err
	}
	defer r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	r.client = c
	return c, nil
}

// expired forgets c when vCenter no longer knows its session (idle timeout, restart), so
// that the next call logs in again.
func (r *restSession) expired(c *rest.Client) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client == c {
		r.client = nil
	}
}

// close logs the REST session out, best effort; a later call fails with ErrClosed.
func (r *restSession) close(ctx context.Context) error {
	r.mu.Lock()
	c := r.client
	r.client = nil
	if r.closed == nil {
		r.closed = ErrClosed
	}
	r.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.Logout(ctx)
}

// taggedVMs returns the managed object ids of the VMs that carry tag. A category or tag
// that does not exist is an error: a tag renamed or mistyped is no empty selection,
// which would release every node the selection held. A REST session vCenter has ended
// is logged in again once.
func (r *restSession) taggedVMs(ctx context.Context, tag Tag) (map[string]bool, error) {
	for attempt := 0; ; attempt++ {
		c, err := r.session(ctx)
		if err != nil {
			return nil, err
		}
		vms, err := r.attached(ctx, c, tag)
		if errors.Is(err, errRESTExpired) && attempt == 0 {
			r.expired(c)
			continue
		}
		return vms, err
	}
}

// tagRef is a tag looked up by its names: its ID and its category's.
type tagRef struct{ id, category string }

// attached lists the VMs tag is attached to. The tag is looked up by its names the first
// time; afterwards its ID is checked to still carry them (two calls instead of one per
// category and tag), so that a tag or category renamed, moved or deleted since is looked
// up again by its names, never followed under its new ones.
func (r *restSession) attached(ctx context.Context, c *rest.Client, tag Tag) (map[string]bool, error) {
	m := tags.NewManager(c)
	r.mu.Lock()
	ref, known := r.tagIDs[tag]
	r.mu.Unlock()
	if known {
		same, err := stillNamed(ctx, m, ref, tag)
		if err != nil {
			return nil, err
		}
		known = same
	}
	if !known {
		r.forgetTag(tag)
		var err error
		if ref, err = lookUpTag(ctx, m, tag); err != nil {
			return nil, err
		}
	}
	refs, err := m.ListAttachedObjects(ctx, ref.id)
	if err != nil {
		return nil, fmt.Errorf("vsphere: list the objects tagged %s: %w", tag, restErr(err))
	}
	r.mu.Lock()
	if r.tagIDs == nil {
		r.tagIDs = map[Tag]tagRef{}
	}
	r.tagIDs[tag] = ref
	r.mu.Unlock()
	out := map[string]bool{}
	for _, ref := range refs {
		if ref := ref.Reference(); ref.Type == "VirtualMachine" {
			out[ref.Value] = true
		}
	}
	return out, nil
}

func (r *restSession) forgetTag(tag Tag) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.tagIDs, tag)
}

// stillNamed tells whether the tag looked up as ref still has tag's name and category.
// Only calls by ID are made here and in lookUpTag: govmomi's calls by name flatten a
// 401 into text, which would hide an ended session from taggedVMs.
func stillNamed(ctx context.Context, m *tags.Manager, ref tagRef, tag Tag) (bool, error) {
	t, err := m.GetTag(ctx, ref.id)
	if rest.IsStatusError(err, http.StatusNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("vsphere: read tag %s: %w", tag, restErr(err))
	}
	if t.Name != tag.Name || t.CategoryID != ref.category {
		return false, nil
	}
	cat, err := m.GetCategory(ctx, ref.category)
	if rest.IsStatusError(err, http.StatusNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("vsphere: read tag category %q: %w", tag.Category, restErr(err))
	}
	return cat.Name == tag.Category, nil
}

// lookUpTag finds the tag by its category's name and its own. A category or tag deleted
// while they are listed is skipped.
func lookUpTag(ctx context.Context, m *tags.Manager, tag Tag) (tagRef, error) {
	catIDs, err := m.ListCategories(ctx)
	if err != nil {
		return tagRef{}, fmt.Errorf("vsphere: list the tag categories: %w", restErr(err))
	}
	catID := ""
	for _, id := range catIDs {
		c, err := m.GetCategory(ctx, id)
		if rest.IsStatusError(err, http.StatusNotFound) {
			continue
		}
		if err != nil {
			return tagRef{}, fmt.Errorf("vsphere: read tag category %s: %w", id, restErr(err))
		}
		if c.Name == tag.Category {
			catID = c.ID
			break
		}
	}
	if catID == "" {
		return tagRef{}, fmt.Errorf("vsphere: tag category %q not found in vCenter", tag.Category)
	}
	tagIDs, err := m.ListTagsForCategory(ctx, catID)
	if err != nil {
		return tagRef{}, fmt.Errorf("vsphere: list the tags of category %q: %w", tag.Category, restErr(err))
	}
	var names []string
	for _, id := range tagIDs {
		t, err := m.GetTag(ctx, id)
		if rest.IsStatusError(err, http.StatusNotFound) {
			continue
		}
		if err != nil {
			return tagRef{}, fmt.Errorf("vsphere: read tag %s: %w", id, restErr(err))
		}
		if t.Name == tag.Name {
			return tagRef{id: t.ID, category: catID}, nil
		}
		names = append(names, t.Name)
	}
	slices.Sort(names)
	if len(names) > 10 {
		names = append(names[:10], "...")
	}
	return tagRef{}, fmt.Errorf("vsphere: tag %q not found in category %q (its tags: %s)", tag.Name, tag.Category, strings.Join(names, ", "))
}
