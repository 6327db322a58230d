// Package metricsauth guards the metrics endpoint as kube-apiserver's delegating
// authentication and authorization do (what controller-runtime's
// filters.WithAuthenticationAndAuthorization builds from k8s.io/apiserver): the caller's
// bearer token is checked by a TokenReview, its right to the path by a
// SubjectAccessReview, both answers cached for a while.
//
// Why not controller-runtime's filter: it links k8s.io/apiserver and, through it, CEL,
// gRPC and OpenTelemetry, 254 packages and 34 MB of the manager's 79 MB binary, and a
// binary's pages the process touches count in its RSS (docs/performance.md, "The runs of
// 2026-12-06, 14:00"). Two API calls and two caches are all the endpoint needs.
package metricsauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// How long answers are kept: as controller-runtime's filter (token reviews a minute,
// either way; access allowed five minutes, denied thirty seconds). A revoked token or
// binding is honoured within these times.
const (
	TokenTTL = time.Minute
	AllowTTL = 5 * time.Minute
	DenyTTL  = 30 * time.Second
)

// MaxEntries bounds each cache: anyone who reaches the port can send tokens, and
// what they send must not grow the manager's memory. A full cache drops what has
// expired, then an entry at random.
const MaxEntries = 1024

// MaxReviews bounds the reviews in flight: a flood of new tokens waits its turn
// (or its caller's timeout) instead of becoming a flood of API requests.
const MaxReviews = 4

// ReviewTimeout bounds one review, as kube-apiserver's delegating authenticator does.
// A review that fails is not retried (controller-runtime's filter retries five times
// within a few seconds): the scrape gets 500 and the scraper asks again at its next
// interval, when the review is made afresh.
const ReviewTimeout = 10 * time.Second

// Reviewer asks the API server who a token is and whether a user may do verb on a
// non-resource path. ok=false is an answer (not authenticated); err is a failure to get one.
type Reviewer interface {
	ReviewToken(ctx context.Context, token string) (user authenticationv1.UserInfo, ok bool, err error)
	ReviewAccess(ctx context.Context, user authenticationv1.UserInfo, verb, path string) (allowed bool, reason string, err error)
}

// Provider is a metricsserver.Options.FilterProvider reviewing through the manager's own
// connection to the API server (it needs create on tokenreviews and subjectaccessreviews,
// config/rbac/metrics_auth_role.yaml).
func Provider(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	authn, err := authnclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	authz, err := authzclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	g := New(apiReviewer{authn: authn, authz: authz}, time.Now)
	return g.Filter, nil
}

// Guard authenticates and authorizes requests, with the caches.
type Guard struct {
	reviewer Reviewer
	now      func() time.Time
	reviews  chan struct{}

	mu     sync.Mutex
	tokens map[[sha256.Size]byte]tokenAnswer // by the token's hash: no token is kept
	// decisions by the hash of what was asked (accessKey): a caller picks the path and
	// method, up to a megabyte each, and an entry must not hold them.
	decisions map[[sha256.Size]byte]accessAnswer
}

type tokenAnswer struct {
	user    authenticationv1.UserInfo
	ok      bool
	expires time.Time
}

type accessAnswer struct {
	allowed bool
	expires time.Time
}

// New returns a Guard asking r, with now as its clock (only durations it measures
// itself are compared: no timestamp from another machine).
func New(r Reviewer, now func() time.Time) *Guard {
	return &Guard{
		reviewer: r, now: now, reviews: make(chan struct{}, MaxReviews),
		tokens: map[[sha256.Size]byte]tokenAnswer{}, decisions: map[[sha256.Size]byte]accessAnswer{},
	}
}

// Filter is the metricsserver.Filter: 401 without a token the API server accepts, 403
// without the right to the path, 500 when a review fails (nothing is cached then).
func (g *Guard) Filter(log logr.Logger, next http.Handler) (http.Handler, error) {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		token, ok := bearerToken(req.Header.Get("Authorization"))
		if !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		user, ok, err := g.authenticate(req.Context(), token)
		if err != nil {
			log.Error(err, "Authentication failed")
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		if !ok {
			log.V(4).Info("Authentication failed")
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		verb := strings.ToLower(req.Method)
		allowed, reason, err := g.authorize(req.Context(), user, verb, req.URL.Path)
		if err != nil {
			msg := fmt.Sprintf("Authorization for user %s failed", user.Username)
			log.Error(err, msg)
			http.Error(w, msg, http.StatusInternalServerError)
			return
		}
		if !allowed {
			msg := fmt.Sprintf("Authorization denied for user %s", user.Username)
			log.V(4).Info(msg, "reason", reason)
			http.Error(w, msg, http.StatusForbidden)
			return
		}
		// What is served next needs no credential: it does not get the caller's.
		req = req.Clone(req.Context())
		req.Header.Del("Authorization")
		next.ServeHTTP(w, req)
	}), nil
}

// bearerToken is the token of an "Authorization: Bearer TOKEN" header: the scheme in
// any case, one space, a token without spaces (kube-apiserver also takes, and ignores,
// more words after the token; this refuses them).
func bearerToken(header string) (string, bool) {
	parts := strings.Split(strings.TrimSpace(header), " ")
	if len(parts) != 2 || !strings.EqualFold(parts[0], "bearer") || parts[1] == "" {
		return "", false
	}
	return parts[1], true
}

func (g *Guard) authenticate(ctx context.Context, token string) (authenticationv1.UserInfo, bool, error) {
	key := sha256.Sum256([]byte(token))
	g.mu.Lock()
	a, hit := g.tokens[key]
	g.mu.Unlock()
	if hit && g.now().Before(a.expires) {
		return a.user, a.ok, nil
	}
	var user authenticationv1.UserInfo
	var ok bool
	err := g.review(ctx, func(ctx context.Context) (err error) {
		user, ok, err = g.reviewer.ReviewToken(ctx, token)
		return err
	})
	if err != nil {
		return user, false, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	put(g.tokens, key, tokenAnswer{user: user, ok: ok, expires: g.now().Add(TokenTTL)}, g.now())
	return user, ok, nil
}

func (g *Guard) authorize(ctx context.Context, user authenticationv1.UserInfo, verb, path string) (bool, string, error) {
	key := sha256.Sum256([]byte(accessKey(user, verb, path)))
	g.mu.Lock()
	a, hit := g.decisions[key]
	g.mu.Unlock()
	if hit && g.now().Before(a.expires) {
		return a.allowed, "cached", nil
	}
	var allowed bool
	var reason string
	err := g.review(ctx, func(ctx context.Context) (err error) {
		allowed, reason, err = g.reviewer.ReviewAccess(ctx, user, verb, path)
		return err
	})
	if err != nil {
		return false, "", err
	}
	ttl := DenyTTL
	if allowed {
		ttl = AllowTTL
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	put(g.decisions, key, accessAnswer{allowed: allowed, expires: g.now().Add(ttl)}, g.now())
	return allowed, reason, nil
}

// review runs one review when a slot is free, within ReviewTimeout.
func (g *Guard) review(ctx context.Context, do func(context.Context) error) error {
	select {
	case g.reviews <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-g.reviews }()
	ctx, cancel := context.WithTimeout(ctx, ReviewTimeout)
	defer cancel()
	return do(ctx)
}

// expiring is what put needs of an answer.
type expiring interface{ expiry() time.Time }

func (a tokenAnswer) expiry() time.Time  { return a.expires }
func (a accessAnswer) expiry() time.Time { return a.expires }

// put stores v under k, keeping m at most MaxEntries: when full, what has expired goes
// first, then (if nothing had) one entry at random (Go's map order).
func put[K comparable, V expiring](m map[K]V, k K, v V, now time.Time) {
	if _, ok := m[k]; !ok && len(m) >= MaxEntries {
		for key, e := range m {
			if !now.Before(e.expiry()) {
				delete(m, key)
			}
		}
		if len(m) >= MaxEntries {
			for key := range m {
				delete(m, key)
				break
			}
		}
	}
	m[k] = v
}

// accessKey is a decision's cache key: everything the review is asked about.
func accessKey(u authenticationv1.UserInfo, verb, path string) string {
	var b strings.Builder
	for _, s := range []string{u.Username, u.UID, verb, path} {
		fmt.Fprintf(&b, "%d:%s|", len(s), s)
	}
	groups := slices.Clone(u.Groups)
	slices.Sort(groups)
	for _, s := range groups {
		fmt.Fprintf(&b, "g%d:%s|", len(s), s)
	}
	keys := make([]string, 0, len(u.Extra))
	for k := range u.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "x%d:%s|", len(k), k)
		for _, s := range u.Extra[k] {
			fmt.Fprintf(&b, "%d:%s|", len(s), s)
		}
	}
	return b.String()
}

// apiReviewer reviews through the API server.
type apiReviewer struct {
	authn authnclient.AuthenticationV1Interface
	authz authzclient.AuthorizationV1Interface
}

func (r apiReviewer) ReviewToken(ctx context.Context, token string) (authenticationv1.UserInfo, bool, error) {
	tr, err := r.authn.TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token},
	}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, false, fmt.Errorf("token review: %w", err)
	}
	if tr.Status.Error != "" {
		// The API server could not tell (an authenticator behind it failed): a failure to
		// get an answer, not kept, as kube-apiserver's webhook authenticator treats it.
		return authenticationv1.UserInfo{}, false, fmt.Errorf("token review: %s", tr.Status.Error)
	}
	if !tr.Status.Authenticated {
		return authenticationv1.UserInfo{}, false, nil
	}
	return tr.Status.User, true, nil
}

func (r apiReviewer) ReviewAccess(ctx context.Context, u authenticationv1.UserInfo, verb, path string) (bool, string, error) {
	extra := make(map[string]authorizationv1.ExtraValue, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := r.authz.SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("subject access review: %w", err)
	}
	return sar.Status.Allowed && !sar.Status.Denied, sar.Status.Reason, nil
}
