package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/yaml"

	"github.com/gpupool/gpupool/internal/testenv"
)

// TestMetricsNeedAuthentication: the metrics endpoint answers only over HTTPS, and only
// to a caller whose token the API server accepts and who is bound to metrics-reader.
func TestMetricsNeedAuthentication(t *testing.T) {
	cfg := apiServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cs := kubernetes.NewForConfigOrDie(cfg)

	// The ClusterRole the install gives to scrapers.
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "config", "rbac", "metrics_reader_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var reader rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(data, &reader); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &reader, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(name string) string {
		t.Helper()
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
		if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	scraper, stranger := token("scraper"), token("stranger")
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "scraper-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: "default"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	addr := freeAddr(t)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsOptions(addr, true, ""), HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// The test trusts the manager's self-signed certificate; what it checks is who
		// may read, and that plain HTTP is not served.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // see above.
	}}
	get := func(scheme, tok string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s/metrics", scheme, addr), nil)
		if err != nil {
			return 0, err
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	// Wait, bounded, for the server to listen.
	for i := 0; ; i++ {
		if _, err := get("https", ""); err == nil {
			break
		} else if i == 100 {
			t.Fatalf("metrics server did not start: %v", err)
		}
		select {
		case err := <-done:
			t.Fatalf("manager stopped: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, tc := range []struct {
		who, token string
		want       int
	}{
		{"anonymous", "", http.StatusUnauthorized},
		{"a service account without metrics-reader", stranger, http.StatusForbidden},
		{"a service account bound to metrics-reader", scraper, http.StatusOK},
	} {
		got, err := get("https", tc.token)
		if err != nil || got != tc.want {
			t.Errorf("%s: HTTP %d (%v), want %d", tc.who, got, err, tc.want)
		}
	}
	if code, err := get("https", "not-a-token"); err == nil && code == http.StatusOK {
		t.Error("metrics are served to a caller with a forged token")
	}
	if code, err := get("http", scraper); err == nil && code == http.StatusOK {
		t.Error("metrics are served over plain HTTP")
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
