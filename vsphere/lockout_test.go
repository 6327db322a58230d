package vsphere_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpupool/gpupool/test/vgpusim"
	"github.com/gpupool/gpupool/vsphere"
)

const canary = "canary-Pa55-7f3e9c" //nolint:gosec // a test password, looked for in errors.

func startSim(t *testing.T) *vgpusim.Sim {
	t.Helper()
	inv, err := vgpusim.LoadFile("../test/vgpusim/testdata/daynight.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return vgpusim.StartInventoryT(t, inv, vgpusim.Options{})
}

func simConfig(sim *vgpusim.Sim, password, version, owner string) vsphere.Config {
	return vsphere.Config{Server: sim.URL.Host, Datacenter: sim.Datacenter(), Username: sim.Username,
		Password: password, Thumbprint: sim.ThumbprintSHA256(), CredentialsVersion: version, Owner: owner}
}

// TestRefusedLoginHeldBack: 1,000 node events, each reconciling 10 pools that share one
// refused account, make one login attempt per back-off period, counted by vgpusim.
func TestRefusedLoginHeldBack(t *testing.T) {
	sim := startSim(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC))
	conn := vsphere.NewConnector(vsphere.WithClock(clk))
	t.Cleanup(func() { _ = conn.Close() })
	ctx := context.Background()

	connectAll := func(version string) error {
		var last error
		for event := 0; event < 1000; event++ {
			for pool := 0; pool < 10; pool++ {
				_, err := conn.Connect(ctx, simConfig(sim, canary, version, fmt.Sprintf("pool-%d", pool)))
				if !errors.Is(err, vsphere.ErrInvalidLogin) {
					t.Fatalf("event %d, pool %d: want a refused login, got %v", event, pool, err)
				}
				if strings.Contains(err.Error(), canary) {
					t.Fatal("the password is in an error")
				}
				last = err
			}
		}
		return last
	}
	last := connectAll("1")
	if n := sim.Logins(); n != 1 {
		t.Fatalf("10,000 connects with refused credentials made %d login attempts, want 1", n)
	}
	var lre *vsphere.LoginRefusedError
	if !errors.As(last, &lre) || !lre.RetryAt.Equal(clk.Now().Add(vsphere.LoginBackoff)) || lre.RetryIn != vsphere.LoginBackoff {
		t.Fatalf("want a LoginRefusedError with RetryAt after the back-off, got %v", last)
	}

	clk.Step(vsphere.LoginBackoff - time.Second)
	_ = connectAll("1")
	if n := sim.Logins(); n != 1 {
		t.Fatalf("before the back-off ended: %d login attempts, want 1", n)
	}
	clk.Step(time.Second)
	_ = connectAll("1")
	if n := sim.Logins(); n != 2 {
		t.Fatalf("after the back-off: %d login attempts, want 2", n)
	}

	// A changed Secret is tried at once, and a fixed one logs in.
	_ = connectAll("2")
	if n := sim.Logins(); n != 3 {
		t.Fatalf("new credentials version: %d login attempts, want 3", n)
	}
	if _, err := conn.Connect(ctx, simConfig(sim, sim.Password, "3", "pool-0")); err != nil {
		t.Fatal(err)
	}
	if n := sim.Logins(); n != 4 {
		t.Fatalf("fixed credentials: %d login attempts, want 4", n)
	}
}

// TestConcurrentRefusedLogins: pools reconciled in parallel share one attempt.
func TestConcurrentRefusedLogins(t *testing.T) {
	sim := startSim(t)
	conn := vsphere.NewConnector()
	t.Cleanup(func() { _ = conn.Close() })
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = conn.Connect(context.Background(), simConfig(sim, canary, "1", fmt.Sprintf("pool-%d", i)))
		}()
	}
	wg.Wait()
	if n := sim.Logins(); n != 1 {
		t.Fatalf("20 concurrent connects with refused credentials made %d login attempts, want 1", n)
	}
}

// TestReloginRefusedAfterRotation: the password is rotated on vCenter before the Secret
// and the session then expires. The re-login is refused once, reported as a refused
// login (not "vCenter unavailable"), and not tried again until the Secret changes.
func TestReloginRefusedAfterRotation(t *testing.T) {
	sim := startSim(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC))
	conn := vsphere.NewConnector(vsphere.WithClock(clk))
	t.Cleanup(func() { _ = conn.Close() })
	ctx := context.Background()
	old := simConfig(sim, sim.Password, "1", "pool-a")
	c, err := conn.Connect(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	sim.SetPassword(canary)
	sim.ExpireSessions()
	before := sim.Logins()

	_, err = c.Inventory(ctx)
	if !errors.Is(err, vsphere.ErrInvalidLogin) {
		t.Fatalf("re-login with a rotated password: want ErrInvalidLogin, got %v", err)
	}
	for i := 0; i < 100; i++ {
		_, _ = c.Inventory(ctx)
		if _, err := conn.Connect(ctx, old); !errors.Is(err, vsphere.ErrInvalidLogin) {
			t.Fatalf("connect %d with the old Secret: want ErrInvalidLogin, got %v", i, err)
		}
	}
	if n := sim.Logins() - before; n != 1 {
		t.Fatalf("after the rotation: %d login attempts, want 1", n)
	}
	if _, err := conn.Connect(ctx, simConfig(sim, canary, "2", "pool-a")); err != nil {
		t.Fatalf("the updated Secret: %v", err)
	}
}

// TestSessionsClosed: a changed credential, an owner moving away or released, and the
// manager stopping each log the session out, counted by vgpusim.
func TestSessionsClosed(t *testing.T) {
	sim := startSim(t)
	base := sim.Sessions()
	conn := vsphere.NewConnector()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- conn.Start(ctx) }()

	cfg := simConfig(sim, sim.Password, "1", "pool-a")
	mustConnect := func(cfg vsphere.Config) {
		t.Helper()
		if _, err := conn.Connect(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	wantSessions := func(want int, when string) {
		t.Helper()
		if got := sim.Sessions() - base; got != want {
			t.Fatalf("%s: %d sessions on vCenter, want %d", when, got, want)
		}
	}
	for i := 0; i < 5; i++ {
		mustConnect(cfg)
		mustConnect(simConfig(sim, sim.Password, "1", "pool-b"))
	}
	wantSessions(1, "two pools sharing an account")

	// New credentials (here: the TLS pin) replace the session; ten changes leave one.
	for i := 0; i < 10; i++ {
		c := cfg
		if i%2 == 0 {
			c.Thumbprint = sim.ThumbprintSHA1()
		}
		c.CredentialsVersion = fmt.Sprint(i + 2)
		mustConnect(c)
	}
	wantSessions(1, "after ten credential changes")

	conn.Release("pool-a")
	wantSessions(1, "one of two owners released")
	conn.Release("pool-b")
	wantSessions(0, "every owner released")

	mustConnect(cfg)
	wantSessions(1, "logged in again")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wantSessions(0, "after the manager stopped")
}

// A pool with a stale Secret for the same account does not log out the session of a
// pool whose Secret is right: refused attempts leave it alone.
func TestRefusedLoginKeepsWorkingSession(t *testing.T) {
	sim := startSim(t)
	conn := vsphere.NewConnector()
	t.Cleanup(func() { _ = conn.Close() })
	ctx := context.Background()
	good := simConfig(sim, sim.Password, "7", "pool-good")
	if _, err := conn.Connect(ctx, good); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if _, err := conn.Connect(ctx, simConfig(sim, canary, "3", "pool-stale")); !errors.Is(err, vsphere.ErrInvalidLogin) {
			t.Fatalf("stale Secret: %v", err)
		}
		c, err := conn.Connect(ctx, good)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Inventory(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := sim.Logins(); n != 2 {
		t.Fatalf("%d logins, want 2: one for each Secret", n)
	}
	if n := sim.Sessions(); n != 1 {
		t.Fatalf("%d sessions, want 1", n)
	}
}
