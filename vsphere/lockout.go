package vsphere

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// LoginBackoff is the shortest time between two logins with credentials vCenter refused.
// vCenter locks an SSO account after a few failed logins within minutes (five within
// three minutes by default), and the account gpupool uses is often shared with the cloud
// provider and the CSI driver: a lockout would stop them too. Ten minutes keeps any
// number of pools and reconciles to one attempt per refused password, well under that.
const LoginBackoff = 10 * time.Minute

// WithClock sets the clock the login back-off is measured with (tests use a fake one).
func WithClock(c clock.PassiveClock) Option {
	return func(sc *SessionCache) {
		if c != nil {
			sc.clock = c
		}
	}
}

// WithLoginBackoff overrides LoginBackoff; zero or less keeps it.
func WithLoginBackoff(d time.Duration) Option {
	return func(sc *SessionCache) {
		if d > 0 {
			sc.backoff = d
		}
	}
}

// LoginRefusedError is returned while the credentials vCenter refused are held back: no
// login is attempted until RetryAt or until the credentials change. It wraps
// ErrInvalidLogin.
type LoginRefusedError struct {
	Server   string
	Username string
	// RetryAt is when a login with the same credentials may be tried again, on the
	// connector's clock (WithClock).
	RetryAt time.Time
	// RetryIn is how long from the moment of the error that is: callers that keep
	// another clock wait RetryIn rather than compare RetryAt with their own clock.
	RetryIn time.Duration
	// Attempted is true when this call did try to log in (and was refused), false when it
	// was answered from the memory of an earlier refusal.
	Attempted bool
}

func (e *LoginRefusedError) Error() string {
	when := "refused the user name or password"
	if !e.Attempted {
		when = "refused the user name or password earlier"
	}
	return fmt.Sprintf("vsphere: log in to vCenter %s as %s: vCenter %s; not trying these credentials again before %s (or until they change)",
		e.Server, e.Username, when, e.RetryAt.UTC().Format(time.RFC3339))
}

// Unwrap makes errors.Is(err, ErrInvalidLogin) hold.
func (e *LoginRefusedError) Unwrap() error { return ErrInvalidLogin }

// refusalKey names one set of credentials: a refusal is remembered for the server, the
// user and the version of the credentials (the Secret's resourceVersion), so that a new
// Secret is tried at once and an unchanged one waits, whichever pool uses it.
type refusalKey struct {
	sessionKey
	version string
}

// credentialsVersion is cfg.CredentialsVersion, or a hash of what the session is made
// with when the caller has no version: a changed password is then still a new version.
func credentialsVersion(cfg Config, fp [32]byte) string {
	if cfg.CredentialsVersion != "" {
		return "v:" + cfg.CredentialsVersion
	}
	sum := sha256.Sum256(fp[:])
	return "h:" + hex.EncodeToString(sum[:8])
}

// heldBack returns the error to answer with when these credentials were refused less
// than the back-off ago. Called with c.mu held.
func (c *SessionCache) heldBack(k refusalKey) *LoginRefusedError {
	at, ok := c.refused[k]
	if !ok {
		return nil
	}
	retry, now := at.Add(c.backoff), c.clock.Now()
	if !now.Before(retry) {
		return nil
	}
	return &LoginRefusedError{Server: k.server, Username: k.username, RetryAt: retry, RetryIn: retry.Sub(now)}
}

// recordRefusal remembers that vCenter refused these credentials now, forgetting other
// versions of the same account's credentials. It returns the error for the caller.
func (c *SessionCache) recordRefusal(k refusalKey) *LoginRefusedError {
	c.mu.Lock()
	defer c.mu.Unlock()
	for other := range c.refused {
		if other.sessionKey == k.sessionKey {
			delete(c.refused, other)
		}
	}
	now := c.clock.Now()
	c.refused[k] = now
	return &LoginRefusedError{Server: k.server, Username: k.username, RetryAt: now.Add(c.backoff), RetryIn: c.backoff, Attempted: true}
}

// forgetRefusals is called after a successful login of the account.
func (c *SessionCache) forgetRefusals(k sessionKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for other := range c.refused {
		if other.sessionKey == k {
			delete(c.refused, other)
		}
	}
}

// loginLock serializes logins of one account, so that pools reconciled at the same time
// with the same refused credentials make one attempt, not one each.
func (c *SessionCache) loginLock(k sessionKey) *sync.Mutex {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.loginLocks[k]
	if !ok {
		m = &sync.Mutex{}
		c.loginLocks[k] = m
	}
	return m
}
