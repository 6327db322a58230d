package vsphere

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/session"
	"github.com/vmware/govmomi/session/keepalive"
	"github.com/vmware/govmomi/vapi/rest"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
	"k8s.io/utils/clock"
)

// DefaultKeepAlive is how often an idle session is kept alive. vCenter ends sessions
// idle for 30 minutes by default; staying well under that keeps one login per process.
const DefaultKeepAlive = 5 * time.Minute

// Option configures a SessionCache.
type Option func(*SessionCache)

// WithLogger sets the logger for session events (login, re-login, logout) and tasks.
func WithLogger(log logr.Logger) Option {
	return func(c *SessionCache) { c.log = log }
}

// WithKeepAlive sets how often an idle session is kept alive; zero or less keeps the default.
func WithKeepAlive(every time.Duration) Option {
	return func(c *SessionCache) {
		if every > 0 {
			c.keepAlive = every
		}
	}
}

// SessionCache is the Connector: it keeps one logged-in session per vCenter and user,
// shares it between Clients, keeps it alive while idle and logs in again when vCenter
// has ended it. Close logs every session out.
type SessionCache struct {
	log       logr.Logger
	keepAlive time.Duration

	clock   clock.PassiveClock
	backoff time.Duration
	// capacityTimeout is each capacity query's deadline (WithCapacityQueryTimeout).
	capacityTimeout time.Duration
	// watchMinVMs is how many VMs a pool names at least for a view to keep its reads
	// (WithWatchedInventory; inventoryview.go).
	watchMinVMs int

	mu         sync.Mutex
	sessions   map[sessionKey]*vcSession
	owners     map[string]sessionKey      // Config.Owner -> the session it uses
	refused    map[refusalKey]time.Time   // credentials vCenter refused, and when
	loginLocks map[sessionKey]*sync.Mutex // one login at a time per account
	identities map[string]string          // CanonicalServer -> instance UUID
	closed     bool
}

var _ Connector = (*SessionCache)(nil)

type sessionKey struct {
	server   string // CanonicalServer
	username string
}

// NewConnector returns an empty session cache.
func NewConnector(opts ...Option) *SessionCache {
	c := &SessionCache{
		log:             logr.Discard(),
		keepAlive:       DefaultKeepAlive,
		clock:           clock.RealClock{},
		backoff:         LoginBackoff,
		capacityTimeout: CapacityQueryTimeout,
		watchMinVMs:     WatchMinVMs,
		sessions:        map[sessionKey]*vcSession{},
		owners:          map[string]sessionKey{},
		refused:         map[refusalKey]time.Time{},
		loginLocks:      map[sessionKey]*sync.Mutex{},
		identities:      map[string]string{},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// ErrClosed is returned by Connect after Close.
var ErrClosed = errors.New("vsphere: session cache is closed")

// ErrInvalidLogin means vCenter refused the user name or password. Retrying with the same
// credentials only brings the account closer to vCenter's lockout.
var ErrInvalidLogin = errors.New("vCenter refused the user name or password")

func isInvalidLogin(err error) bool {
	if !soap.IsSoapFault(err) {
		return false
	}
	_, ok := soap.ToSoapFault(err).VimFault().(types.InvalidLogin)
	return ok
}

// Connect returns a Client for the config's datacenter, logging in only when no session
// for that vCenter and user is cached (or the cached one used other credentials or TLS
// settings). Clients are cheap: get one per reconcile rather than keeping one, since a
// Client of a replaced or closed session fails with ErrClosed.
//
// Credentials vCenter refused are not tried again for the back-off (LoginBackoff) unless
// their CredentialsVersion changes: Connect then fails with a *LoginRefusedError without
// contacting vCenter.
func (c *SessionCache) Connect(ctx context.Context, cfg Config) (Client, error) {
	u, err := serverURL(cfg.Server)
	if err != nil {
		return nil, err
	}
	if cfg.Username == "" {
		return nil, fmt.Errorf("vsphere: no username for vCenter %s", u.Host)
	}
	key := sessionKey{server: CanonicalServer(u.Host), username: cfg.Username}
	s, err := c.session(ctx, u, key, cfg)
	if err != nil {
		return nil, err
	}
	c.own(cfg.Owner, key)
	dc, err := s.datacenter(ctx, cfg.Datacenter)
	if err != nil {
		return nil, err
	}
	return &client{s: s, dc: dc, log: c.log.WithValues("server", key.server, "datacenter", dc.name),
		clock: c.clock, capacityTimeout: c.capacityTimeout, watchMinVMs: c.watchMinVMs}, nil
}

// session returns the cached session of key if it was made with cfg, or logs in. Logins
// of one account are serialized, so a refusal is seen by every caller that waited.
func (c *SessionCache) session(ctx context.Context, u *url.URL, key sessionKey, cfg Config) (*vcSession, error) {
	fp := fingerprint(cfg)
	if s, err := c.cached(key, fp); s != nil || err != nil {
		return s, err
	}
	lock := c.loginLock(key)
	lock.Lock()
	defer lock.Unlock()
	if s, err := c.cached(key, fp); s != nil || err != nil {
		return s, err
	}
	rk := refusalKey{sessionKey: key, version: credentialsVersion(cfg, fp)}
	c.mu.Lock()
	held := c.heldBack(rk)
	c.mu.Unlock()
	if held != nil {
		return nil, held
	}
	fresh, err := c.login(ctx, u, cfg, fp, rk)
	if errors.Is(err, ErrInvalidLogin) {
		return nil, c.recordRefusal(rk)
	}
	if err != nil {
		return nil, err
	}
	c.forgetRefusals(key)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		fresh.close()
		return nil, ErrClosed
	}
	// Under the login lock no other login of key ran: any session there is stale.
	stale := c.sessions[key]
	c.sessions[key] = fresh
	c.mu.Unlock()
	if stale != nil {
		// The session was made with other credentials or TLS settings: it would only
		// take up one of vCenter's limited sessions.
		c.log.Info("Replacing vCenter session: credentials or TLS settings changed", "server", key.server, "user", key.username)
		stale.close()
	}
	return fresh, nil
}

// cached returns the session of key when it was made with fingerprint fp. A session made
// with other credentials or TLS settings stays until a login with the new ones works:
// a pool with a stale or refused Secret must not log out the session of a pool whose
// Secret is right.
func (c *SessionCache) cached(key sessionKey, fp [32]byte) (*vcSession, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if s := c.sessions[key]; s != nil && s.fingerprint == fp && !s.isGone() {
		return s, nil
	}
	return nil, nil
}

// drop logs out of s and removes it from the cache if it is still the session of key.
func (c *SessionCache) drop(key sessionKey, s *vcSession) {
	c.mu.Lock()
	if c.sessions[key] == s {
		delete(c.sessions, key)
	}
	c.mu.Unlock()
	s.close()
}

// Close logs out of every cached session and stops their keep-alives. Clients handed out
// before fail afterwards.
func (c *SessionCache) Close() error {
	c.mu.Lock()
	c.closed = true
	sessions := c.sessions
	c.sessions = map[sessionKey]*vcSession{}
	c.mu.Unlock()
	for _, s := range sessions {
		s.close()
	}
	return nil
}

// serverURL turns "vc.example.com", "vc.example.com:8443" or "https://vc/sdk" into the
// SDK URL. Credentials in the server string are refused so they never reach an error.
func serverURL(server string) (*url.URL, error) {
	if server == "" {
		return nil, errors.New("vsphere: no vCenter server configured")
	}
	raw := server
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("vsphere: vCenter server %q is not a host name or https URL", redactServer(server))
	}
	if u.User != nil {
		return nil, fmt.Errorf("vsphere: vCenter server %s must not carry credentials; use the username and password fields", u.Redacted())
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("vsphere: vCenter server %s: only https is supported", u.Host)
	}
	// "https://vc/sdk/" and "https://vc/" name the same endpoint as "https://vc/sdk".
	if u.Path = strings.TrimRight(u.Path, "/"); u.Path == "" {
		u.Path = vim25.Path
	}
	return u, nil
}

func redactServer(s string) string {
	if i := strings.LastIndex(s, "@"); i >= 0 {
		return "***@" + s[i+1:]
	}
	return s
}

// fingerprint identifies what a session was made with, so a changed password or TLS
// setting replaces the session instead of silently keeping the old one.
func fingerprint(cfg Config) [32]byte {
	h := sha256.New()
	for _, part := range [][]byte{
		[]byte(cfg.Password), []byte(cfg.Thumbprint), cfg.CABundle, []byte(fmt.Sprint(cfg.Insecure)),
	} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// vcSession is one logged-in session, shared by the Clients of a vCenter and user.
type vcSession struct {
	server      string
	username    string
	fingerprint [32]byte
	vc          *vim25.Client
	keepAlive   *keepalive.HandlerSOAP
	reauth      *reauth
	log         logr.Logger

	mu  sync.Mutex
	dcs map[string]datacenter
	fbs map[types.ManagedObjectReference]map[string]int64 // host -> profile -> frame buffer MiB
	// scopes are the last scope of each scoped inventory read (scope.go), by pool VMs.
	scopes map[string]inventoryScope
	// devices are the vGPU devices of each scope's VMs by configuration version
	// (devicememo.go), by pool VMs as scopes.
	devices map[string]deviceMemo
	// views keep large pools' reads (inventoryview.go), by pool VMs as scopes; retired
	// are those dropped for idleness whose collectors are still to be destroyed;
	// viewsOff, until when a pool's reads are made afresh after its view was dropped.
	views    map[string]*inventoryView
	retired  []*inventoryView
	viewsOff map[string]time.Time
	gone     bool

	// capacity remembers vCenter's capacity answers per host, and a query that timed out.
	capacity capacityMemo

	// rest is the session of vCenter's REST API, for tags (tags.go).
	rest *restSession
}

type datacenter struct {
	ref  types.ManagedObjectReference
	name string
	path string
}

// maxIdleConnsPerVCenter is how many idle connections a session keeps to its vCenter for
// the next calls. Go's default of 2 made a pass that starts 16 tasks at once (and pools
// reconciled side by side) close and open connections all the time: 2.4 % of the
// manager's CPU during a 64-host switch went to TLS handshakes with vCenter.
const maxIdleConnsPerVCenter = 32

// login opens a session. The password lives only in the closure that logs in.
func (c *SessionCache) login(ctx context.Context, u *url.URL, cfg Config, fp [32]byte, rk refusalKey) (*vcSession, error) {
	tlsCfg, err := tlsConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("vsphere: vCenter %s: %w", u.Host, err)
	}
	sc := soap.NewClient(u, cfg.Insecure && cfg.Thumbprint == "" && len(cfg.CABundle) == 0)
	sc.DefaultTransport().TLSClientConfig = tlsCfg
	sc.DefaultTransport().MaxIdleConnsPerHost = maxIdleConnsPerVCenter

	vc, err := vim25.NewClient(ctx, sc)
	if err != nil {
		return nil, fmt.Errorf("vsphere: connect to vCenter %s: %w", u.Host, err)
	}
	log := c.log.WithValues("server", u.Host, "user", cfg.Username)
	ka := keepalive.NewHandlerSOAP(sc, c.keepAlive, nil)
	user := url.UserPassword(cfg.Username, cfg.Password)
	doLogin := func(ctx context.Context) error {
		return session.NewManager(vc).Login(ctx, user)
	}
	ra := &reauth{next: ka, login: doLogin, log: log}
	vc.RoundTripper = ra
	var self *vcSession
	// A re-login that vCenter refuses (the password was rotated on vCenter before the
	// Secret) is a refusal like any other: remembered, and the session is dropped so
	// that no Client of it logs in again.
	ra.refused = func() error {
		err := c.recordRefusal(rk)
		c.drop(rk.sessionKey, self)
		return err
	}

	if err := doLogin(ctx); err != nil {
		ka.Stop()
		sc.CloseIdleConnections()
		if isInvalidLogin(err) {
			return nil, fmt.Errorf("vsphere: log in to vCenter %s as %s: %w", u.Host, cfg.Username, ErrInvalidLogin)
		}
		return nil, fmt.Errorf("vsphere: log in to vCenter %s as %s: %w", u.Host, cfg.Username, err)
	}
	log.Info("Logged in to vCenter")
	restLogin := func(ctx context.Context) (*rest.Client, error) {
		rc := rest.NewClient(vc)
		if err := rc.Login(ctx, user); err != nil {
			if isRESTRefusal(err) {
				err = ErrInvalidLogin
			}
			return nil, fmt.Errorf("vsphere: log in to vCenter %s's REST API (tags) as %s: %w", u.Host, cfg.Username, err)
		}
		log.Info("Logged in to vCenter's REST API (tags)")
		return rc, nil
	}
	self = &vcSession{
		rest:        &restSession{login: restLogin, refused: ra.refused},
		server:      u.Host,
		username:    cfg.Username,
		fingerprint: fp,
		vc:          vc,
		keepAlive:   ka,
		reauth:      ra,
		log:         log,
		dcs:         map[string]datacenter{},
		fbs:         map[types.ManagedObjectReference]map[string]int64{},
	}
	return self, nil
}

func (s *vcSession) isGone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone
}

// close logs out (best effort: the session may already be gone) and stops the keep-alive.
func (s *vcSession) close() {
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		return
	}
	s.gone = true
	s.mu.Unlock()
	// Clients handed out earlier must not log in again behind Close's back.
	s.reauth.closed.Store(true)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := methods.Logout(ctx, s.keepAlive, &types.Logout{This: *s.vc.ServiceContent.SessionManager}); err != nil {
		s.log.V(1).Info("Logout failed; the session will time out on its own", "err", err.Error())
	} else {
		s.log.Info("Logged out of vCenter")
	}
	if err := s.rest.close(ctx); err != nil {
		s.log.V(1).Info("Logout of the REST API failed; the session will time out on its own", "err", err.Error())
	}
	s.keepAlive.Stop()
	s.vc.CloseIdleConnections()
}

// datacenter resolves (once per session) the named datacenter, or the only one when
// name is empty.
func (s *vcSession) datacenter(ctx context.Context, name string) (datacenter, error) {
	s.mu.Lock()
	dc, ok := s.dcs[name]
	s.mu.Unlock()
	if ok {
		return dc, nil
	}
	finder := find.NewFinder(s.vc, false)
	var (
		d   *object.Datacenter
		err error
	)
	if name == "" {
		d, err = finder.DefaultDatacenter(ctx)
	} else {
		d, err = finder.Datacenter(ctx, name)
	}
	if err != nil {
		return datacenter{}, fmt.Errorf("vsphere: vCenter %s: find datacenter %q: %w", s.server, name, err)
	}
	dc = datacenter{ref: d.Reference(), name: d.Name(), path: d.InventoryPath}
	s.mu.Lock()
	s.dcs[name] = dc
	s.mu.Unlock()
	return dc, nil
}

// reauth logs in again, once, when a call fails because vCenter no longer knows the
// session (NotAuthenticated: idle timeout, vCenter restart), then retries the call.
// Concurrent callers that hit the same expiry share one login.
type reauth struct {
	next  soap.RoundTripper
	login func(context.Context) error
	// refused is called when vCenter refuses the re-login; it returns the error to report.
	refused func() error
	log     logr.Logger

	mu     sync.Mutex
	gen    atomic.Uint64 // incremented by each successful re-login
	closed atomic.Bool   // set when the session is closed: no more logins
}

func (r *reauth) RoundTrip(ctx context.Context, req, res soap.HasFault) error {
	if r.closed.Load() {
		return ErrClosed
	}
	gen := r.gen.Load()
	err := r.next.RoundTrip(ctx, req, res)
	if err == nil || !fault.Is(err, &types.NotAuthenticated{}) {
		return err
	}
	switch req.(type) {
	case *methods.LoginBody, *methods.LogoutBody:
		return err
	}
	if lerr := r.relogin(ctx, gen); lerr != nil {
		return fmt.Errorf("session expired and logging in again failed: %w", lerr)
	}
	// The failed call decoded its fault into res; start from a clean response.
	if v := reflect.ValueOf(res); v.Kind() == reflect.Pointer && !v.IsNil() {
		v.Elem().Set(reflect.Zero(v.Elem().Type()))
	}
	return r.next.RoundTrip(ctx, req, res)
}

func (r *reauth) relogin(ctx context.Context, gen uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return ErrClosed
	}
	if r.gen.Load() != gen {
		return nil // another call logged in again meanwhile
	}
	if err := r.login(ctx); err != nil {
		if isInvalidLogin(err) && r.refused != nil {
			r.closed.Store(true)
			return r.refused()
		}
		return err
	}
	r.gen.Add(1)
	r.log.Info("Logged in again: vCenter had ended the session")
	return nil
}
