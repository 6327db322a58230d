package vsphere

import (
	"context"
	"fmt"

	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/soap"
)

// InstanceUUID is vCenter's instance UUID (ServiceContent.about.instanceUuid): the same
// for every spelling and address of one vCenter, so it tells whether two pools talk to
// the same one.
func (c *client) InstanceUUID() string { return c.s.vc.ServiceContent.About.InstanceUuid }

// Identifier finds a vCenter's instance UUID without logging in.
type Identifier interface {
	Identify(ctx context.Context, cfg Config) (string, error)
}

var _ Identifier = (*SessionCache)(nil)

// Identify returns the instance UUID of cfg's vCenter. It sends no credentials: the
// service content, which holds the UUID, is readable before login. Results are cached
// per server for the life of the cache (a vCenter keeps its instance UUID). A session
// already open to the server answers without a connection.
func (c *SessionCache) Identify(ctx context.Context, cfg Config) (string, error) {
	u, err := serverURL(cfg.Server)
	if err != nil {
		return "", err
	}
	server := CanonicalServer(u.Host)
	c.mu.Lock()
	if id, ok := c.identities[server]; ok {
		c.mu.Unlock()
		return id, nil
	}
	for k, s := range c.sessions {
		if k.server == server {
			id := s.vc.ServiceContent.About.InstanceUuid
			c.mu.Unlock()
			return id, nil
		}
	}
	c.mu.Unlock()

	tlsCfg, err := tlsConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("vsphere: vCenter %s: %w", u.Host, err)
	}
	sc := soap.NewClient(u, cfg.Insecure && cfg.Thumbprint == "" && len(cfg.CABundle) == 0)
	sc.DefaultTransport().TLSClientConfig = tlsCfg
	defer sc.CloseIdleConnections()
	vc, err := vim25.NewClient(ctx, sc)
	if err != nil {
		return "", fmt.Errorf("vsphere: identify vCenter %s: %w", u.Host, err)
	}
	id := vc.ServiceContent.About.InstanceUuid
	c.mu.Lock()
	c.identities[server] = id
	c.mu.Unlock()
	return id, nil
}
