package localenv

// What the fault tests do to a running environment: kill and restart the operator,
// freeze and thaw a process.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// waitManagerReady waits, bounded, until the operator answers its readiness probe.
func (e *Env) waitManagerReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(e.manager.readyURL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the operator did not become ready; see %s", filepath.Join(e.Dir, "logs", "manager.log"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// KillManager ends the operator at once (SIGKILL to its process group), as a node
// failure or an OOM kill would, in the middle of whatever it does.
func (e *Env) KillManager() error {
	pid, err := readPid(e.pidFile("manager"))
	if err != nil {
		return fmt.Errorf("the operator's pid: %w", err)
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	if !waitGone(pid, 10*time.Second) {
		return fmt.Errorf("the operator (pid %d) outlived SIGKILL", pid)
	}
	return nil
}

// StartManager starts the operator again as Up did, and waits until it is ready.
func (e *Env) StartManager(ctx context.Context) error {
	if err := e.spawnManager(e.Kubeconfig, e.manager.certDir, e.manager.args...); err != nil {
		return err
	}
	return e.waitManagerReady(ctx)
}

// Freeze stops (SIGSTOP) the named processes, "vgpusim" (started by Up) or a
// control-plane component kwokctl started ("kube-apiserver"), until Thaw: a machine that
// hangs, rather than one that fails.
func (e *Env) Freeze(names ...string) error { return e.signal(syscall.SIGSTOP, names) }

// Thaw resumes what Freeze stopped.
func (e *Env) Thaw(names ...string) error { return e.signal(syscall.SIGCONT, names) }

func (e *Env) signal(sig syscall.Signal, names []string) error {
	for _, name := range names {
		pid, err := readPid(e.pidFile(name))
		if err != nil {
			return fmt.Errorf("no pid for %s: %w", name, err)
		}
		if err := syscall.Kill(pid, sig); err != nil {
			return fmt.Errorf("signalling %s (pid %d): %w", name, pid, err)
		}
	}
	return nil
}

// WaitPool waits until cond holds for the pool or ctx ends (waitPool: a watch).
func (e *Env) WaitPool(ctx context.Context, name, what string, cond func(*gpupoolv1.GPUPoolProfile) bool) error {
	return e.waitPool(ctx, name, what, cond)
}

// Kill ends a process Freeze can name with SIGKILL, as a crash would.
func (e *Env) Kill(name string) error { return e.signal(syscall.SIGKILL, []string{name}) }

// ComponentsRun tells whether the components Supervise keeps running run.
func (e *Env) ComponentsRun() bool {
	for _, name := range supervised {
		if !running(e.pidFile(name)) {
			return false
		}
	}
	return true
}

// ManagerRuns tells whether the operator's process runs. It exits by itself when it
// loses its leader lease (an API server frozen for longer than the lease's renew
// deadline): in a cluster its Deployment starts it again, here StartManager does.
func (e *Env) ManagerRuns() bool { return running(e.pidFile("manager")) }

// pidFile is the pid file of a process Up spawned ("manager", "vgpusim") or, failing
// that, of a component kwokctl started ("kube-apiserver", "kube-scheduler").
func (e *Env) pidFile(name string) string {
	if f := filepath.Join(e.Dir, "pids", name+".pid"); fileExists(f) {
		return f
	}
	return filepath.Join(e.Dir, "kwok", "clusters", clusterName, "pids", name+".pid")
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
