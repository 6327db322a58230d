// Command vgpusim serves a simulated vCenter with NVIDIA vGPU hosts on loopback, for
// running gpupool and govc without a real vSphere. See docs/vgpusim.md.
//
//	vgpusim --inventory test/vgpusim/testdata/daynight.yaml --env-file /tmp/vgpusim.env &
//	. /tmp/vgpusim.env && govc ls
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vmware/govmomi/vim25/types"

	"github.com/gpupool/gpupool/test/vgpusim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil))
}

// run serves until ctx ends. ready, when set, is called once the simulator serves.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(*vgpusim.Sim)) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "vgpusim:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	inv, err := vgpusim.LoadFile(cfg.inventory)
	if err != nil {
		log.Error("Cannot load inventory", "err", err)
		return 1
	}
	sim, err := vgpusim.Start(inv, cfg.opts(log))
	if err != nil {
		log.Error("Cannot start simulator", "err", err)
		return 1
	}
	defer sim.Close()
	for method, f := range cfg.failures {
		sim.FailTasks(method, f.n, f.fault)
	}

	env := exportLines(sim)
	if _, err := io.WriteString(stdout, env); err != nil {
		log.Error("Cannot write environment", "err", err)
		return 1
	}
	if cfg.envFile != "" {
		if err := writeFileAtomic(cfg.envFile, env); err != nil {
			log.Error("Cannot write env file", "path", cfg.envFile, "err", err)
			return 1
		}
		defer os.Remove(cfg.envFile)
	}
	log.Info("Ready", "url", sim.URL.String(), "thumbprintSHA256", sim.ThumbprintSHA256(),
		"signals", "SIGUSR1 expires sessions, SIGUSR2 toggles refusing connections")
	if ready != nil {
		ready(sim)
	}

	return serve(ctx, sim, cfg, log)
}

// serve runs the simulator's controls until ctx ends: SIGUSR1 and --session-ttl expire
// the sessions, SIGUSR2 toggles refusing connections, and the call and task counts are
// written to their files four times a second.
func serve(ctx context.Context, sim *vgpusim.Sim, cfg *config, log *slog.Logger) int {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(signals)
	var expire <-chan time.Time
	if cfg.sessionTTL > 0 {
		t := time.NewTicker(cfg.sessionTTL)
		defer t.Stop()
		expire = t.C
	}
	refusing := false
	var writeCalls <-chan time.Time
	if cfg.callsFile != "" {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		writeCalls = t.C
	}
	for {
		select {
		case <-ctx.Done():
			log.Info("Shutting down")
			return 0
		case <-writeCalls:
			writeCounts(sim, cfg)
		case <-expire:
			sim.ExpireSessions()
		case sig := <-signals:
			switch sig {
			case syscall.SIGUSR1:
				sim.ExpireSessions()
			case syscall.SIGUSR2:
				if refusing = !refusing; refusing {
					sim.RefuseConnections()
				} else if err := sim.AcceptConnections(); err != nil {
					log.Error("Cannot accept connections again", "err", err)
					return 1
				}
			}
		}
	}
}

// writeCounts writes the simulator's call counts, per-VM call counts and task records to
// the files the flags name.
func writeCounts(sim *vgpusim.Sim, cfg *config) {
	if b, err := json.Marshal(sim.CallCounts()); err == nil {
		_ = writeFileAtomic(cfg.callsFile, string(b))
	}
	if cfg.vmCallsFile != "" {
		if b, err := json.Marshal(sim.VMCallCounts()); err == nil {
			_ = writeFileAtomic(cfg.vmCallsFile, string(b))
		}
	}
	if cfg.tasksFile != "" {
		if b, err := json.Marshal(sim.TaskRecords()); err == nil {
			_ = writeFileAtomic(cfg.tasksFile, string(b))
		}
	}
}

type config struct {
	inventory  string
	listen     string
	username   string
	password   string
	envFile    string
	sessionTTL time.Duration
	callsFile  string
	// vmCallsFile gets the counts per VM (managed object id) and method, with callsFile.
	vmCallsFile string
	// tasksFile gets the VM tasks with their start and finish times, with callsFile.
	tasksFile  string
	delays     durations
	taskDelays durations
	failures   failures
}

func (c *config) opts(log *slog.Logger) vgpusim.Options {
	return vgpusim.Options{
		Username:   c.username,
		Password:   c.password,
		Listen:     c.listen,
		Delays:     c.delays,
		TaskDelays: c.taskDelays,
		Logger:     log,
	}
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	cfg := &config{delays: durations{}, taskDelays: durations{}, failures: failures{}}
	fs := flag.NewFlagSet("vgpusim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.inventory, "inventory", "", "inventory YAML file (required)")
	fs.StringVar(&cfg.listen, "listen", "127.0.0.1:0", "loopback address to serve on")
	fs.StringVar(&cfg.username, "username", vgpusim.DefaultUsername, "the only accepted user name")
	fs.StringVar(&cfg.password, "password", vgpusim.DefaultPassword, "the only accepted password")
	fs.StringVar(&cfg.envFile, "env-file", "", "also write the export lines to this file (removed on exit)")
	fs.DurationVar(&cfg.sessionTTL, "session-ttl", 0, "expire all sessions this often (0: never)")
	fs.StringVar(&cfg.callsFile, "calls-file", "", "write the SOAP call counts, as a JSON object by method, to this file four times a second")
	fs.StringVar(&cfg.tasksFile, "tasks-file", "", "with --calls-file: also write the VM tasks with the simulator's start and finish times, as a JSON list, to this file")
	fs.StringVar(&cfg.vmCallsFile, "vm-calls-file", "", "with --calls-file: also write the SOAP call counts per VM, as a JSON object by managed object id (vm-42) and method, to this file")
	fs.Var(cfg.delays, "delay", "delay a SOAP method, as Method=duration (repeatable), e.g. PowerOnVM_Task=2s")
	fs.Var(cfg.taskDelays, "task-delay", "keep tasks of a method running, as Method=duration (repeatable)")
	fs.Var(cfg.failures, "fail", "fail the next N tasks of a method, as Method=N or Method=N:Fault (repeatable)")
	failPowerOn := fs.Int("fail-poweron", 0, "fail the next N PowerOnVM_Task tasks (same as --fail PowerOnVM_Task=N)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: vgpusim --inventory FILE [flags]\n\nServes a simulated vCenter with vGPU hosts on loopback.\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.inventory == "" {
		return nil, errors.New("--inventory is required")
	}
	if *failPowerOn > 0 {
		cfg.failures["PowerOnVM_Task"] = failure{n: *failPowerOn}
	}
	return cfg, nil
}

// durations is a repeatable Method=duration flag.
type durations map[string]time.Duration

func (d durations) String() string { return fmt.Sprint(map[string]time.Duration(d)) }

func (d durations) Set(v string) error {
	method, value, ok := strings.Cut(v, "=")
	if !ok || method == "" {
		return fmt.Errorf("%q is not Method=duration", v)
	}
	dur, err := time.ParseDuration(value)
	if err != nil || dur < 0 {
		return fmt.Errorf("%q: bad duration", v)
	}
	d[method] = dur
	return nil
}

type failure struct {
	n     int
	fault types.BaseMethodFault
}

// failures is a repeatable Method=N[:Fault] flag.
type failures map[string]failure

// faultsByName are the faults --fail can inject.
var faultsByName = map[string]func() types.BaseMethodFault{
	"GenericVmConfigFault":       func() types.BaseMethodFault { return &types.GenericVmConfigFault{Reason: "injected failure"} },
	"InsufficientResourcesFault": func() types.BaseMethodFault { return &types.InsufficientResourcesFault{} },
	"InvalidState":               func() types.BaseMethodFault { return &types.InvalidState{} },
	"NotSupported":               func() types.BaseMethodFault { return &types.NotSupported{} },
	"TaskInProgress":             func() types.BaseMethodFault { return &types.TaskInProgress{} },
	"Timedout":                   func() types.BaseMethodFault { return &types.Timedout{} },
}

func (f failures) String() string { return fmt.Sprint(len(f), " failing methods") }

func (f failures) Set(v string) error {
	method, spec, ok := strings.Cut(v, "=")
	if !ok || method == "" {
		return fmt.Errorf("%q is not Method=N[:Fault]", v)
	}
	count, faultName, _ := strings.Cut(spec, ":")
	n, err := strconv.Atoi(count)
	if err != nil || n <= 0 {
		return fmt.Errorf("%q: N must be a positive number", v)
	}
	fl := failure{n: n}
	if faultName != "" {
		mk, ok := faultsByName[faultName]
		if !ok {
			names := make([]string, 0, len(faultsByName))
			for name := range faultsByName {
				names = append(names, name)
			}
			sort.Strings(names)
			return fmt.Errorf("%q: unknown fault; use one of %s", v, strings.Join(names, ", "))
		}
		fl.fault = mk()
	}
	f[method] = fl
	return nil
}

// exportLines are shell lines that point govc at the simulator.
func exportLines(sim *vgpusim.Sim) string {
	var b strings.Builder
	for _, kv := range sim.GovcEnv() {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v))
	}
	return b.String()
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeFileAtomic writes via a temporary file, so a script waiting for the file never
// reads half of it.
func writeFileAtomic(path, content string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".vgpusim-env-*")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(content); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
