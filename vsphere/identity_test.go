package vsphere_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpupool/gpupool/vsphere"
)

// Identify reads a vCenter's instance UUID without logging in, and two vCenters differ.
func TestIdentifyWithoutCredentials(t *testing.T) {
	a, b := startSim(t), startSim(t)
	conn := vsphere.NewConnector()
	t.Cleanup(func() { _ = conn.Close() })
	ctx := context.Background()
	id := func(server, thumbprint string) string {
		t.Helper()
		uuid, err := conn.Identify(ctx, vsphere.Config{Server: server, Thumbprint: thumbprint})
		if err != nil || uuid == "" {
			t.Fatalf("Identify(%s): %q, %v", server, uuid, err)
		}
		return uuid
	}
	ua := id(a.URL.Host, a.ThumbprintSHA256())
	if ub := id(b.URL.Host, b.ThumbprintSHA256()); ub == ua {
		t.Fatalf("two simulators have the same instance UUID %s", ua)
	}
	if again := id("https://localhost:"+a.URL.Port()+"/sdk/", a.ThumbprintSHA256()); again != ua {
		t.Fatalf("another spelling of one vCenter: %s, want %s", again, ua)
	}
	if n := a.Logins() + b.Logins(); n != 0 {
		t.Fatalf("Identify logged in %d times", n)
	}
	fresh := vsphere.NewConnector() // nothing cached
	t.Cleanup(func() { _ = fresh.Close() })
	if _, err := fresh.Identify(ctx, vsphere.Config{Server: a.URL.Host, Thumbprint: strings.Repeat("AB:", 31) + "AB"}); err == nil {
		t.Fatal("Identify must verify the certificate like a login")
	}
}
