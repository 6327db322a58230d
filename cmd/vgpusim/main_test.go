package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpupool/gpupool/test/vgpusim"
	"github.com/gpupool/gpupool/vsphere"
)

func TestRunServesAndWritesEnv(t *testing.T) {
	envFile := filepath.Join(t.TempDir(), "vgpusim.env")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr bytes.Buffer
	ready := make(chan *vgpusim.Sim, 1)
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{
			"--inventory", "../../test/vgpusim/testdata/daynight.yaml",
			"--env-file", envFile,
			"--delay", "RetrieveServiceContent=1ms",
			"--fail-poweron", "1",
			"--fail", "SuspendVM_Task=2:TaskInProgress",
		}, &stdout, &stderr, func(s *vgpusim.Sim) { ready <- s })
	}()

	var sim *vgpusim.Sim
	select {
	case sim = <-ready:
	case code := <-done:
		t.Fatalf("exited %d: %s", code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("not ready within 30s")
	}

	want := "export GOVC_URL=" + sim.URL.String() + "\n"
	if !strings.HasPrefix(stdout.String(), want) {
		t.Fatalf("stdout %q does not start with %q", stdout.String(), want)
	}
	for _, line := range []string{"export GOVC_INSECURE=1\n", "export GOVC_DATACENTER=dc1\n", "export GOVC_USERNAME=gpupool\n"} {
		if !strings.Contains(stdout.String(), line) {
			t.Errorf("stdout lacks %q", line)
		}
	}
	file, err := os.ReadFile(envFile)
	if err != nil || string(file) != stdout.String() {
		t.Fatalf("env file %q, %v", file, err)
	}

	// The printed environment reaches a working vCenter, with the injected failure.
	conn := vsphere.NewConnector()
	defer func() { _ = conn.Close() }()
	c, err := conn.Connect(ctx, vsphere.Config{
		Server: sim.URL.Host, Datacenter: "dc1", Username: sim.Username, Password: sim.Password, Insecure: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := sim.VMRef("gpu-day-1")
	id, err := c.Suspend(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := c.Task(ctx, id); info.Fault != "TaskInProgress" {
		t.Fatalf("--fail: %+v", info)
	}

	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	if _, err := os.Stat(envFile); !os.IsNotExist(err) {
		t.Fatalf("env file left behind: %v", err)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--inventory", "x.yaml", "--delay", "PowerOnVM_Task"},
		{"--inventory", "x.yaml", "--fail", "PowerOnVM_Task=0"},
		{"--inventory", "x.yaml", "--fail", "PowerOnVM_Task=1:NoSuchFault"},
		{"--inventory", "x.yaml", "extra"},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut, nil); code != 2 {
			t.Errorf("%q: exit code %d, want 2", args, code)
		}
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--inventory", "does-not-exist.yaml"}, &out, &errOut, nil); code != 1 {
		t.Errorf("missing inventory: exit code %d", code)
	}
	if code := run(context.Background(), []string{"--inventory", "../../test/vgpusim/testdata/daynight.yaml", "--listen", "0.0.0.0:0"}, &out, &errOut, nil); code != 1 {
		t.Errorf("non-loopback listen: exit code %d", code)
	}
}
