package vgpusim_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpupool/gpupool/test/vgpusim"
)

// buildGovc builds govc from the govmomi version in go.mod (see internal/govc). Go's build
// cache makes every build after the first quick.
func buildGovc(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds govc")
	}
	bin := filepath.Join(t.TempDir(), "govc")
	out, err := exec.Command("go", "build", "-o", bin, "./internal/govc").CombinedOutput()
	if err != nil {
		t.Fatalf("build govc: %v\n%s", err, out)
	}
	return bin
}

// govcRunner runs the govc binary against the simulator.
func govcRunner(t *testing.T, govc string, sim *vgpusim.Sim) (run func(args ...string) (string, error), ok func(args ...string) string) {
	env := []string{"GOVMOMI_HOME=" + t.TempDir(), "HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	env = append(env, sim.GovcEnv()...)
	run = func(args ...string) (string, error) {
		cmd := exec.Command(govc, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	ok = func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("govc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	return run, ok
}

func contains(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("output lacks %q:\n%s", w, out)
		}
	}
}

// TestGovcHostAvailability checks maintenance mode, unreachable hosts and multi-vGPU VMs
// with the real govc commands.
func TestGovcHostAvailability(t *testing.T) {
	govc := buildGovc(t)
	sim := startSim(t, "features.yaml")
	run, ok := govcRunner(t, govc, sim)

	contains(t, ok("host.info", "-host", "/dc1/host/esx-down/esx-down"), "State:", "notResponding")
	contains(t, ok("host.info", "-host", "/dc1/host/esx-mm/esx-mm"), "Maintenance Mode")
	out, err := run("vm.power", "-on", "mm-1")
	if err == nil {
		t.Fatalf("powered on a VM of a host in maintenance mode:\n%s", out)
	}
	contains(t, out, "maintenance mode")
	out, err = run("vm.power", "-on", "down-1")
	if err == nil {
		t.Fatalf("powered on a VM of an unreachable host:\n%s", out)
	}
	contains(t, out, "disconnected")

	// esx-b runs nothing: govc's enter returns once the host is in maintenance mode.
	ok("host.maintenance.enter", "/dc1/host/gpu/esx-b")
	contains(t, ok("host.info", "-host", "/dc1/host/gpu/esx-b"), "Maintenance Mode")
	ok("host.maintenance.exit", "/dc1/host/gpu/esx-b")
	contains(t, ok("host.info", "-host", "/dc1/host/gpu/esx-b"), "State:", "connected")

	// govc host.disconnect takes esx-a away: its VMs cannot start until host.reconnect.
	ok("host.disconnect", "/dc1/host/gpu/esx-a")
	contains(t, ok("host.info", "-host", "/dc1/host/gpu/esx-a"), "disconnected")
	if out, err := run("vm.power", "-on", "mover"); err == nil {
		t.Fatalf("powered on a VM of a disconnected host:\n%s", out)
	}
	ok("host.reconnect", "/dc1/host/gpu/esx-a")

	// A VM with two vGPU devices shows both; powered on, it holds a GPU for each.
	contains(t, ok("gpu.vm.info", "-vm", "big-1"), "GPU 0:", "GPU 1:", "grid_a40-48q")
	out = ok("device.ls", "-vm", "big-1")
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "VirtualPCIPassthrough") && strings.Contains(line, "NVIDIA GRID vGPU grid_a40-48q") {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("device.ls lists %d 48Q vGPUs, want 2:\n%s", n, out)
	}
	ok("vm.power", "-off", "small-1", "mid-1")
	ok("vm.power", "-on", "big-1")
	if got := sim.GPUs("esx-a"); len(got["0000:3b:00.0"]) != 1 || len(got["0000:5e:00.0"]) != 1 {
		t.Fatalf("big-1's vGPUs run on %v", got)
	}
}

// TestGovc checks the simulator against the real govc commands: what vCenter reports about
// vGPU hosts and VMs, and the placement rules on power-on.
func TestGovc(t *testing.T) {
	govc := buildGovc(t)
	sim := startSim(t, "daynight.yaml")

	env := []string{"GOVMOMI_HOME=" + t.TempDir(), "HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	env = append(env, sim.GovcEnv()...)
	run := func(args ...string) (string, error) {
		cmd := exec.Command(govc, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	ok := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("govc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	contains := func(out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("output lacks %q:\n%s", w, out)
			}
		}
	}

	contains(ok("about"), "VMware vCenter Server", "API type:", "VirtualCenter")
	contains(ok("ls", "/dc1/vm"), "/dc1/vm/gpu-day-1", "/dc1/vm/gpu-night-1")
	contains(ok("ls", "/dc1/host"), "/dc1/host/esx-01")

	contains(ok("gpu.host.info", "-host", "esx-01"),
		"PCI ID: 0000:3b:00.0", "Device Name: Tesla P100", "Vendor ID: 0x10de", "Bus: 0x3b")
	contains(ok("gpu.host.profile.ls", "-host", "esx-01"),
		"grid_p100-1q", "grid_p100-4q", "grid_p100-16q")
	contains(ok("gpu.vm.info", "-vm", "gpu-day-1"), "GPU 0:", "Summary: NVIDIA GRID vGPU grid_p100-4q")
	contains(ok("device.info", "-vm", "gpu-night-1"), "VirtualPCIPassthrough", "NVIDIA GRID vGPU grid_p100-16q")

	// The 16Q VM cannot join the four 4Q VMs on the GPU.
	out, err := run("vm.power", "-on", "gpu-night-1")
	if err == nil {
		t.Fatalf("powered on the 16Q VM next to 4Q VMs:\n%s", out)
	}
	contains(out, "insufficient", "same-size rule")

	// Park the day VMs; then the GPU is free for the 16Q VM.
	ok("vm.power", "-suspend", "gpu-day-1", "gpu-day-2", "gpu-day-3", "gpu-day-4")
	contains(ok("vm.info", "gpu-day-1"), "suspended")
	ok("vm.power", "-on", "gpu-night-1")
	contains(ok("vm.info", "gpu-night-1"), "poweredOn")
	if got := sim.GPUs("esx-01")["0000:3b:00.0"]; len(got) != 1 || got[0] != "gpu-night-1" {
		t.Fatalf("GPU runs %v", got)
	}

	// govc refuses to add a vGPU to a running VM itself; powered off, the add works.
	ok("vm.power", "-off", "gpu-night-1")
	ok("gpu.vm.add", "-vm", "gpu-night-1", "-profile", "grid_p100-8q")
	contains(ok("gpu.vm.info", "-vm", "gpu-night-1"), "GPU 1:", "grid_p100-8q")
}
