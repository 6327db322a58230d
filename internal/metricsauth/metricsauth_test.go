package metricsauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeReviewer knows tokens (token -> user) and grants (username -> allowed paths for
// get); it counts its reviews and fails while fail is set.
type fakeReviewer struct {
	mu             sync.Mutex
	users          map[string]authenticationv1.UserInfo
	grants         map[string][]string
	tokenReviews   int
	accessReviews  int
	fail           error
	lastVerb, path string
}

func (f *fakeReviewer) ReviewToken(_ context.Context, token string) (authenticationv1.UserInfo, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokenReviews++
	if f.fail != nil {
		return authenticationv1.UserInfo{}, false, f.fail
	}
	u, ok := f.users[token]
	return u, ok, nil
}

func (f *fakeReviewer) ReviewAccess(_ context.Context, u authenticationv1.UserInfo, verb, path string) (bool, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.accessReviews++
	f.lastVerb, f.path = verb, path
	if f.fail != nil {
		return false, "", f.fail
	}
	if verb != "get" {
		return false, "only get", nil
	}
	for _, p := range f.grants[u.Username] {
		if p == path {
			return true, "", nil
		}
	}
	return false, "no grant", nil
}

func (f *fakeReviewer) counts() (int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokenReviews, f.accessReviews
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// served is the handler behind the guard: it records the Authorization header it saw.
type served struct{ auth []string }

func (s *served) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	w.WriteHeader(http.StatusOK)
}

func setup(t *testing.T) (*fakeReviewer, *clock, *served, http.Handler) {
	t.Helper()
	f := &fakeReviewer{
		users: map[string]authenticationv1.UserInfo{
			"scraper-token":  {Username: "system:serviceaccount:monitoring:prometheus", Groups: []string{"system:serviceaccounts"}},
			"stranger-token": {Username: "system:serviceaccount:default:stranger"},
		},
		grants: map[string][]string{"system:serviceaccount:monitoring:prometheus": {"/metrics"}},
	}
	c := &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := &served{}
	h, err := New(f, c.now).Filter(logr.Discard(), s)
	if err != nil {
		t.Fatal(err)
	}
	return f, c, s, h
}

func call(h http.Handler, method, path, auth string) int {
	req := httptest.NewRequest(method, path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

// TestHeadersWithoutABearerTokenAreNotReviewed: whatever else the header says, no token
// is 401 and costs no API call.
func TestHeadersWithoutABearerTokenAreNotReviewed(t *testing.T) {
	f, _, s, h := setup(t)
	for _, auth := range []string{"", " ", "Bearer", "Bearer ", "Bearer  scraper-token", "Basic c2NyYXBlcjpzZWNyZXQ=",
		"scraper-token", "Token scraper-token", "Bearer scraper-token extra", "Bearerscraper-token"} {
		if code := call(h, http.MethodGet, "/metrics", auth); code != http.StatusUnauthorized {
			t.Errorf("Authorization %q: HTTP %d, want 401", auth, code)
		}
	}
	if tr, ar := f.counts(); tr != 0 || ar != 0 {
		t.Errorf("%d token and %d access reviews for headers without a token, want none", tr, ar)
	}
	if len(s.auth) != 0 {
		t.Errorf("the handler was reached %d times", len(s.auth))
	}
	for _, auth := range []string{"Bearer scraper-token", "bearer scraper-token", "BEARER scraper-token", "  Bearer scraper-token  "} {
		if code := call(h, http.MethodGet, "/metrics", auth); code != http.StatusOK {
			t.Errorf("Authorization %q: HTTP %d, want 200", auth, code)
		}
	}
}

// TestWhoMayRead: unknown tokens 401, known without the right 403, for any verb and path
// the right does not name; the served handler never sees the caller's token.
func TestWhoMayRead(t *testing.T) {
	f, _, s, h := setup(t)
	for _, tc := range []struct {
		method, path, token string
		want                int
	}{
		{http.MethodGet, "/metrics", "scraper-token", http.StatusOK},
		{http.MethodGet, "/metrics", "stranger-token", http.StatusForbidden},
		{http.MethodGet, "/metrics", "forged", http.StatusUnauthorized},
		{http.MethodPost, "/metrics", "scraper-token", http.StatusForbidden},
		{http.MethodGet, "/metrics/extra", "scraper-token", http.StatusForbidden},
		{http.MethodGet, "/", "scraper-token", http.StatusForbidden},
	} {
		if code := call(h, tc.method, tc.path, "Bearer "+tc.token); code != tc.want {
			t.Errorf("%s %s as %s: HTTP %d, want %d", tc.method, tc.path, tc.token, code, tc.want)
		}
		if tc.token != "forged" && (f.path != tc.path || f.lastVerb != map[string]string{http.MethodGet: "get", http.MethodPost: "post"}[tc.method]) {
			t.Errorf("%s %s: reviewed %s %s", tc.method, tc.path, f.lastVerb, f.path)
		}
	}
	for _, a := range s.auth {
		if a != "" {
			t.Errorf("the served handler saw Authorization %q", a)
		}
	}
	if len(s.auth) != 1 {
		t.Errorf("the handler served %d requests, want 1", len(s.auth))
	}
}

// TestAnswersAreCachedForTheirTime: a token is reviewed once a TokenTTL, an allowed access
// once an AllowTTL and a denied one once a DenyTTL; a failed review is 500 and not kept.
func TestAnswersAreCachedForTheirTime(t *testing.T) {
	f, c, _, h := setup(t)
	want := func(token string, code, tokenReviews, accessReviews int) {
		t.Helper()
		if got := call(h, http.MethodGet, "/metrics", "Bearer "+token); got != code {
			t.Fatalf("%s: HTTP %d, want %d", token, got, code)
		}
		if tr, ar := f.counts(); tr != tokenReviews || ar != accessReviews {
			t.Fatalf("%s: %d token and %d access reviews, want %d and %d", token, tr, ar, tokenReviews, accessReviews)
		}
	}
	want("scraper-token", 200, 1, 1)
	want("scraper-token", 200, 1, 1)
	c.advance(TokenTTL - time.Nanosecond)
	want("scraper-token", 200, 1, 1)
	c.advance(time.Nanosecond) // the token's answer expires; the access's does not
	want("scraper-token", 200, 2, 1)
	c.advance(AllowTTL - TokenTTL)
	want("scraper-token", 200, 3, 2)

	want("stranger-token", 403, 4, 3)
	c.advance(DenyTTL - time.Nanosecond)
	want("stranger-token", 403, 4, 3)
	c.advance(time.Nanosecond)
	want("stranger-token", 403, 4, 4)

	want("forged", 401, 5, 4)
	want("forged", 401, 5, 4) // a refused token is kept too: retrying it costs nothing
	c.advance(TokenTTL)
	want("forged", 401, 6, 4)

	c.advance(TokenTTL)
	f.fail = errors.New("connection refused")
	want("scraper-token", 500, 7, 4)
	want("scraper-token", 500, 8, 4)
	f.fail = nil
	want("scraper-token", 200, 9, 4) // its access answer (2.5 of 5 minutes old) is kept
}

// TestCachesStayBounded: however many tokens and users come, each cache holds at most
// MaxEntries, and an answer still in its time survives when expired ones can go.
func TestCachesStayBounded(t *testing.T) {
	f, c, _, _ := setup(t)
	g := New(f, c.now)
	h, _ := g.Filter(logr.Discard(), &served{})
	for i := range 3 * MaxEntries {
		tok := fmt.Sprintf("tok-%d", i)
		f.mu.Lock()
		f.users[tok] = authenticationv1.UserInfo{Username: fmt.Sprintf("user-%d", i)}
		f.mu.Unlock()
		call(h, http.MethodGet, "/metrics", "Bearer "+tok)
		call(h, http.MethodGet, "/metrics", "Bearer forged-"+tok)
		if i%100 == 0 {
			c.advance(time.Second)
		}
	}
	g.mu.Lock()
	nt, nd := len(g.tokens), len(g.decisions)
	g.mu.Unlock()
	if nt > MaxEntries || nd > MaxEntries {
		t.Fatalf("caches hold %d tokens and %d decisions, at most %d each", nt, nd, MaxEntries)
	}
}

// TestPutDropsExpiredFirst: a full cache drops every expired answer before any in its
// time, and one at random only when none has expired; an update never evicts.
func TestPutDropsExpiredFirst(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m := map[int]accessAnswer{}
	for i := range MaxEntries {
		exp := now.Add(time.Minute)
		if i%2 == 0 {
			exp = now.Add(-time.Second)
		}
		m[i] = accessAnswer{expires: exp}
	}
	put(m, -1, accessAnswer{expires: now.Add(time.Minute)}, now)
	if len(m) != MaxEntries/2+1 {
		t.Fatalf("%d entries after a put into a full cache half expired, want %d", len(m), MaxEntries/2+1)
	}
	for k, v := range m {
		if !now.Before(v.expires) {
			t.Fatalf("expired entry %d kept", k)
		}
	}
	for i := 0; len(m) < MaxEntries; i++ {
		put(m, 10*MaxEntries+i, accessAnswer{expires: now.Add(time.Minute)}, now)
	}
	put(m, 1, accessAnswer{allowed: true, expires: now.Add(time.Hour)}, now) // an update
	if len(m) != MaxEntries || !m[1].allowed {
		t.Fatalf("an update of a full cache: %d entries (want %d), updated %v", len(m), MaxEntries, m[1].allowed)
	}
	put(m, -2, accessAnswer{expires: now.Add(time.Minute)}, now)
	if _, ok := m[-2]; !ok || len(m) != MaxEntries {
		t.Fatalf("a new answer into a full cache without expired ones: %d entries, stored %v", len(m), ok)
	}
}

// blockingReviewer holds every token review until released, counting those in flight.
type blockingReviewer struct {
	fakeReviewer
	release  chan struct{}
	entered  chan struct{}
	mu       sync.Mutex
	inFlight int
	most     int
}

func (b *blockingReviewer) ReviewToken(ctx context.Context, token string) (authenticationv1.UserInfo, bool, error) {
	b.mu.Lock()
	b.inFlight++
	b.most = max(b.most, b.inFlight)
	b.mu.Unlock()
	b.entered <- struct{}{}
	<-b.release
	b.mu.Lock()
	b.inFlight--
	b.mu.Unlock()
	return authenticationv1.UserInfo{}, false, nil
}

// TestReviewsInFlightAreBounded: a burst of new tokens asks the API server at most
// MaxReviews at a time; the others wait their turn, and one whose caller gives up leaves.
func TestReviewsInFlightAreBounded(t *testing.T) {
	b := &blockingReviewer{release: make(chan struct{}), entered: make(chan struct{}, 64)}
	c := &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	h, _ := New(b, c.now).Filter(logr.Discard(), &served{})
	const n = 3 * MaxReviews
	var wg sync.WaitGroup
	codes := make(chan int, n+1)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- call(h, http.MethodGet, "/metrics", fmt.Sprintf("Bearer t-%d", i))
		}()
	}
	for range MaxReviews {
		<-b.entered
	}
	// A caller that gives up while waiting for a slot is answered, not held.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil).WithContext(ctx)
	req.Header.Set("Authorization", "Bearer late")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("a caller gone while waiting: HTTP %d, want 500", rec.Code)
	}
	close(b.release)
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusUnauthorized {
			t.Errorf("HTTP %d, want 401", code)
		}
	}
	if b.most > MaxReviews {
		t.Errorf("%d reviews in flight at once, at most %d", b.most, MaxReviews)
	}
}

// TestAccessKeySeparatesWhatIsAsked: two users who differ in anything the review is asked
// about get different decisions; the order of groups does not matter.
func TestAccessKeySeparatesWhatIsAsked(t *testing.T) {
	base := authenticationv1.UserInfo{Username: "u", UID: "1", Groups: []string{"a", "b"}, Extra: map[string]authenticationv1.ExtraValue{"k": {"v"}}}
	variants := []authenticationv1.UserInfo{
		{Username: "u2", UID: "1", Groups: []string{"a", "b"}, Extra: base.Extra},
		{Username: "u", UID: "2", Groups: []string{"a", "b"}, Extra: base.Extra},
		{Username: "u", UID: "1", Groups: []string{"a"}, Extra: base.Extra},
		{Username: "u", UID: "1", Groups: []string{"a", "b", "c"}, Extra: base.Extra},
		{Username: "u", UID: "1", Groups: []string{"a|b"}, Extra: base.Extra},
		{Username: "u", UID: "1", Groups: []string{"a", "b"}},
		{Username: "u", UID: "1", Groups: []string{"a", "b"}, Extra: map[string]authenticationv1.ExtraValue{"k": {"w"}}},
		{Username: "u", UID: "1", Groups: []string{"a", "b"}, Extra: map[string]authenticationv1.ExtraValue{"k2": {"v"}}},
		{Username: "u|1", Groups: []string{"a", "b"}, Extra: base.Extra},
	}
	k := accessKey(base, "get", "/metrics")
	for _, v := range variants {
		if accessKey(v, "get", "/metrics") == k {
			t.Errorf("%+v shares %+v's decision", v, base)
		}
	}
	if accessKey(base, "post", "/metrics") == k || accessKey(base, "get", "/metricz") == k {
		t.Error("a different verb or path shares the decision")
	}
	swapped := base
	swapped.Groups = []string{"b", "a"}
	if accessKey(swapped, "get", "/metrics") != k {
		t.Error("the order of groups changes the decision's key")
	}
}

// TestLongPathsAreNotKept: the path and method a caller sends are part of what is
// asked, but a decision kept holds only their hash: a valid token sending long unique
// paths does not grow the manager's heap by what it sends.
func TestLongPathsAreNotKept(t *testing.T) {
	f, c, _, _ := setup(t)
	g := New(f, c.now)
	h, _ := g.Filter(logr.Discard(), &served{})
	long := strings.Repeat("x", 100<<10)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 200 {
		if code := call(h, http.MethodGet, fmt.Sprintf("/metrics/%d/%s", i, long), "Bearer scraper-token"); code != http.StatusForbidden {
			t.Fatalf("HTTP %d, want 403", code)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if g.mu.Lock(); len(g.decisions) != 200 {
		t.Errorf("%d decisions kept, want 200", len(g.decisions))
	}
	g.mu.Unlock()
	// 200 paths of 100 KiB are 20 MiB; the decisions themselves a few KiB.
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 4<<20 {
		t.Errorf("the heap grew by %d bytes for 200 decisions: what was asked is kept", grew)
	}
}

// TestTokenReviewErrorsAreNotKept: a TokenReview the API server answers with an error
// (an authenticator behind it failed) is a failure to get an answer: 500, not cached,
// asked again next time, as kube-apiserver's webhook authenticator treats it.
func TestTokenReviewErrorsAreNotKept(t *testing.T) {
	cs := fake.NewClientset()
	reviews := 0
	cs.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		reviews++
		return true, &authenticationv1.TokenReview{Status: authenticationv1.TokenReviewStatus{Error: "oidc: provider unreachable"}}, nil
	})
	c := &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	h, _ := New(apiReviewer{authn: cs.AuthenticationV1(), authz: cs.AuthorizationV1()}, c.now).Filter(logr.Discard(), &served{})
	for i := range 2 {
		if code := call(h, http.MethodGet, "/metrics", "Bearer some-token"); code != http.StatusInternalServerError {
			t.Errorf("call %d: HTTP %d, want 500", i, code)
		}
	}
	if reviews != 2 {
		t.Errorf("%d token reviews for two calls, want 2 (an error is not kept)", reviews)
	}
	cs.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		return true, &authenticationv1.TokenReview{Status: authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "u"}}}, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		ok := sar.Spec.User == "u" && sar.Spec.NonResourceAttributes != nil && sar.Spec.NonResourceAttributes.Path == "/metrics" && sar.Spec.NonResourceAttributes.Verb == "get"
		return true, &authorizationv1.SubjectAccessReview{Status: authorizationv1.SubjectAccessReviewStatus{Allowed: ok}}, nil
	})
	if code := call(h, http.MethodGet, "/metrics", "Bearer some-token"); code != http.StatusOK {
		t.Errorf("once the API server answers: HTTP %d, want 200", code)
	}
}
