package localenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpupool/gpupool/internal/replay"
	"github.com/gpupool/gpupool/internal/trace"
)

// TraceFile is the demand demo's recording (kubectl gpupool record), in the state folder.
const TraceFile = "demand-trace.jsonl"

// traceStep is the replay's decision period for the demo: its timings are seconds.
const traceStep = time.Second

// recorder is a running kubectl gpupool record.
type recorder struct {
	cmd  *exec.Cmd
	done chan error
	pid  string
	path string
}

// startRecording runs kubectl gpupool record on the pool, into the state folder, until
// stop; its pid is kept with the environment's, so that Down ends it if this process
// does not.
func (e *Env) startRecording(pool string) (*recorder, error) {
	bin := filepath.Join(e.BinDir, "kubectl-gpupool")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("kubectl-gpupool is missing in %s: run 'make build' first", e.BinDir)
	}
	logf, err := os.Create(filepath.Join(e.Dir, "logs", "record.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	r := &recorder{path: filepath.Join(e.Dir, TraceFile), done: make(chan error, 1), pid: filepath.Join(e.Dir, "pids", "record.pid")}
	r.cmd = exec.Command(bin, "record", pool, "--file", r.path, "--kubeconfig", e.Kubeconfig)
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting kubectl gpupool record: %w", err)
	}
	if err := os.WriteFile(r.pid, []byte(strconv.Itoa(r.cmd.Process.Pid)), 0o644); err != nil {
		_ = r.cmd.Process.Kill()
		return nil, err
	}
	go func() { r.done <- r.cmd.Wait() }()
	return r, nil
}

// stop interrupts the recorder, which writes its trace, and waits for it (killed after
// a while); it reads the trace back.
func (r *recorder) stop() (*trace.Trace, error) {
	defer os.Remove(r.pid)
	_ = r.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-r.done:
		if err != nil {
			return nil, fmt.Errorf("kubectl gpupool record: %w (logs/record.log)", err)
		}
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		return nil, fmt.Errorf("kubectl gpupool record did not end within 30s of an interrupt (logs/record.log); killed: %w", <-r.done)
	}
	f, err := os.Open(r.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return trace.Read(f)
}

// simulateRecording prints kubectl gpupool simulate's table of the trace (the live spec
// replayed) and returns the replay, for the end-to-end test.
func (e *Env) simulateRecording(ctx context.Context, out io.Writer, tr *trace.Trace, path string) (*replay.Result, error) {
	fmt.Fprintf(out, "==> the demo replayed offline from its recording (kubectl gpupool simulate %s --step %s):\n", TraceFile, traceStep)
	cmd := exec.CommandContext(ctx, filepath.Join(e.BinDir, "kubectl-gpupool"), "simulate", path, "--step", traceStep.String())
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kubectl gpupool simulate: %w", err)
	}
	return replay.Run(tr, &tr.Header.Spec, replay.Options{Step: traceStep})
}
