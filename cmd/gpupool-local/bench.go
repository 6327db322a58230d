package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/test/localenv"
)

type benchConfig struct {
	hosts      *string
	gpus       *int
	pods       *bool
	delays     *string
	sequential *int
	idle       *time.Duration
	json       *string
	nodeLease  *time.Duration
	cpQPS      *int
	starts     *int
	logLevel   *string
	env        *string
	watch      *int
	statusWait *time.Duration
	passPace   *time.Duration
}

func benchFlags(fs *flag.FlagSet) benchConfig {
	return benchConfig{
		hosts:      fs.String("hosts", "4,16,64", "bench: the pool sizes to run, in ESXi hosts"),
		gpus:       fs.Int("gpus", 4, "bench: GPUs per host"),
		pods:       fs.Bool("pods", true, "bench: one light pod per day node"),
		delays:     fs.String("task-delays", "SuspendVM_Task=2s,PowerOnVM_Task=3s,PowerOffVM_Task=2s,ReconfigVM_Task=2s", "bench: vgpusim task durations"),
		sequential: fs.Int("sequential-hosts", 1, "bench: hosts the sequential script switches (extrapolated to all); 0 skips it"),
		idle:       fs.Duration("idle", time.Minute, "bench: how long the manager's CPU use is measured at rest, twice: from the end of the last switch, and after that"),
		json:       fs.String("json", "", "bench: also write the results, per size, as JSON to this file"),
		cpQPS:      fs.Int("control-plane-qps", 200, "bench: requests a second the controller manager and the scheduler allow themselves (burst twice that; 0: their defaults, 20 and 50); the manager allows itself 200"),
		starts:     fs.Int("max-concurrent-starts", 0, "bench: the manager's --max-concurrent-starts, and the task starts the environment-alone floor asks at once (0: the manager's default, 16)"),
		logLevel:   fs.String("manager-log-level", "", "bench: the manager's --zap-log-level (debug: a line per pass, with where its time went, in the kept logs/manager.log; \"\": info)"),
		watch:      fs.Int("vcenter-watch-min-vms", -1, "bench: the manager's --vcenter-watch-min-vms (-1: its default; 0: every pool read whole each pass)"),
		statusWait: fs.Duration("status-write-interval", -1, "bench: the manager's --status-write-interval (negative: its default; 0: every pass writes the pool's status)"),
		passPace:   fs.Duration("min-pass-interval", -1, "bench: the manager's --min-pass-interval (negative: its default; 0: a pass at each change)"),
		env:        fs.String("manager-env", "", "bench: more of the manager's environment, KEY=value[,KEY=value...] (such as GOGC=50, to weigh the collector's CPU against the RSS)"),
		nodeLease:  fs.Duration("node-lease", localenv.DefaultNodeLease, "bench: kwok's node lease (renewed every quarter of it; a longer one gives the node lifecycle controller's grace period the same length)"),
	}
}

// managerEnv parses --manager-env: KEY=value pairs separated by commas, "" for none.
func managerEnv(s string) ([]string, error) {
	var out []string
	for _, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("--manager-env: %q is not KEY=value (write such as GOGC=50)", kv)
		}
		out = append(out, kv)
	}
	return out, nil
}

// runBench runs the transition benchmark once per size, each on a fresh local
// environment, and prints the table.
func runBench(ctx context.Context, opts localenv.Options, c benchConfig, timeout time.Duration, keep bool) error {
	delays := map[string]time.Duration{}
	var vgArgs []string
	for _, kv := range strings.Split(*c.delays, ",") {
		if kv == "" {
			continue
		}
		m, v, ok := strings.Cut(kv, "=")
		d, err := time.ParseDuration(v)
		if !ok || err != nil {
			return fmt.Errorf("--task-delays: %q is not Method=duration", kv)
		}
		delays[m] = d
		vgArgs = append(vgArgs, "--task-delay", kv)
	}
	opts.NodeLease = *c.nodeLease
	opts.ControlPlaneQPS = *c.cpQPS
	if *c.starts < 0 {
		return fmt.Errorf("--max-concurrent-starts %d: at least 1, or 0 for the manager's default", *c.starts)
	}
	opts.MaxConcurrentStarts = *c.starts
	opts.ManagerLogLevel = *c.logLevel
	if *c.watch >= 0 {
		opts.ManagerWatchMinVMs = c.watch
	}
	if *c.statusWait >= 0 {
		opts.ManagerStatusInterval = c.statusWait
	}
	if *c.passPace >= 0 {
		opts.ManagerMinPassInterval = c.passPace
	}
	env, err := managerEnv(*c.env)
	if err != nil {
		return err
	}
	opts.ManagerEnv = append(opts.ManagerEnv, env...)
	var results []*localenv.BenchResult
	var errs []error
	for _, h := range strings.Split(*c.hosts, ",") {
		hosts, err := strconv.Atoi(strings.TrimSpace(h))
		if err != nil || hosts < 1 {
			return fmt.Errorf("--hosts: %q is not a number of hosts", h)
		}
		r, err := benchOne(ctx, opts, vgArgs, localenv.BenchOptions{Hosts: hosts, GPUs: *c.gpus, Pods: *c.pods, TaskDelays: delays,
			SequentialHosts: *c.sequential, Idle: *c.idle}, timeout, keep)
		if err != nil {
			errs = append(errs, fmt.Errorf("%d hosts: %w", hosts, err))
			fmt.Fprintln(os.Stderr, "==>", errs[len(errs)-1])
			continue
		}
		results = append(results, r)
		fmt.Print(localenv.FormatBench([]*localenv.BenchResult{r}))
		fmt.Print(localenv.FormatReactions([]*localenv.BenchResult{r}))
		fmt.Print(localenv.FormatPhases([]*localenv.BenchResult{r}))
		fmt.Print(localenv.FormatOnce([]*localenv.BenchResult{r}))
		fmt.Print(localenv.FormatCPU([]*localenv.BenchResult{r}))
		fmt.Print(localenv.FormatFloor([]*localenv.BenchResult{r}))
	}
	fmt.Println("==> transition benchmark (task delays " + *c.delays + ")")
	fmt.Print(localenv.FormatBench(results))
	fmt.Println("==> gpupool's reaction: from a worker's precondition (watched, or vgpusim's task log) to its next action")
	fmt.Print(localenv.FormatReactions(results))
	fmt.Println("==> where the manager's passes spent their time during the two switches, by phase")
	fmt.Print(localenv.FormatPhases(results))
	fmt.Println("==> each switch's vSphere operations per changed VM and cordons per drained node (each should be 1: any repeat is flagged)")
	fmt.Print(localenv.FormatOnce(results))
	fmt.Println("==> the environment's own time: CPU seconds each process used during the two switches (two cores shared)")
	fmt.Print(localenv.FormatCPU(results))
	fmt.Println("==> the environment alone, before the pool: a bare client patches the day nodes and evicts as many pods, " + strconv.Itoa(execute.MaxConcurrentWrites) + " at a time (no switch can cordon or drain faster); the day>night floor is those evictions, then one GPU's critical path without its eviction")
	fmt.Print(localenv.FormatFloor(results))
	if *c.json != "" {
		if err := localenv.WriteBenchJSON(*c.json, results); err != nil {
			errs = append(errs, fmt.Errorf("--json: %w", err))
		}
	}
	return errors.Join(errs...)
}

func benchOne(ctx context.Context, opts localenv.Options, vgArgs []string, b localenv.BenchOptions, timeout time.Duration, keep bool) (*localenv.BenchResult, error) {
	dir, err := os.MkdirTemp("", fmt.Sprintf("gpupool-bench-%d-", b.Hosts))
	if err != nil {
		return nil, err
	}
	opts.Dir = dir
	opts.Inventory = filepath.Join(dir, "inventory.yaml")
	if err := localenv.WriteBenchInventory(opts.Inventory, b.Hosts, b.GPUs); err != nil {
		return nil, err
	}
	opts.VgpusimArgs = append(append([]string{}, vgArgs...), "--calls-file", filepath.Join(dir, "vgpusim-calls.json"),
		"--tasks-file", filepath.Join(dir, "vgpusim-tasks.json"))
	fmt.Printf("==> %d hosts x %d GPUs: starting the local environment in %s\n", b.Hosts, b.GPUs, dir)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	e, err := localenv.Up(ctx, opts)
	if err != nil {
		return nil, err
	}
	r, runErr := localenv.RunBench(ctx, e, b)
	downErr := localenv.Down(opts)
	if runErr == nil && downErr == nil && !keep {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Printf("==> %d hosts: logs and state kept in %s\n", b.Hosts, dir)
	}
	return r, errors.Join(runErr, downErr)
}
