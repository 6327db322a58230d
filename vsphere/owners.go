package vsphere

import "context"

// own records that owner uses the session of key. When the owner used another session
// before (its pool moved to another vCenter or user) and no other owner uses that one,
// it is logged out: vCenter limits concurrent sessions, and a session kept alive for
// nobody would count against the limit until the operator restarts.
func (c *SessionCache) own(owner string, key sessionKey) {
	if owner == "" {
		return
	}
	c.mu.Lock()
	old, had := c.owners[owner]
	c.owners[owner] = key
	c.mu.Unlock()
	if had && old != key {
		c.releaseIfUnused(old)
	}
}

// Release forgets owner, such as a deleted GPUPoolProfile, and logs out of its session
// when no other owner uses it.
func (c *SessionCache) Release(owner string) {
	c.mu.Lock()
	key, had := c.owners[owner]
	delete(c.owners, owner)
	c.mu.Unlock()
	if had {
		c.releaseIfUnused(key)
	}
}

func (c *SessionCache) releaseIfUnused(key sessionKey) {
	c.mu.Lock()
	for _, k := range c.owners {
		if k == key {
			c.mu.Unlock()
			return
		}
	}
	s := c.sessions[key]
	delete(c.sessions, key)
	c.mu.Unlock()
	if s != nil {
		c.log.Info("Logging out of an unused vCenter session", "server", key.server, "user", key.username)
		s.close()
	}
}

// Start makes the cache a controller-runtime Runnable: it waits until ctx is done (the
// manager is stopping) and then logs out of every session, so that restarts do not
// leave sessions behind on vCenter until they time out.
func (c *SessionCache) Start(ctx context.Context) error {
	<-ctx.Done()
	return c.Close()
}

// NeedLeaderElection is false: standby replicas hold no sessions but must still close
// the cache when they stop.
func (c *SessionCache) NeedLeaderElection() bool { return false }
