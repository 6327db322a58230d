// Command gpupool-local runs gpupool's embedded local environment on loopback: a real
// control plane built from source, kwok nodes, vgpusim as vCenter, and the operator.
//
//	gpupool-local demo [--keep]        show a day -> night -> day cycle, then stop everything
//	gpupool-local demo-demand [--keep] show a training Job bringing night in early by demand
//	gpupool-local demo-count-demand [--keep]
//	                                   show demand converting one of two GPUs for a training Job
//	gpupool-local up --dir DIR         start the environment and return when it is ready
//	gpupool-local down --dir DIR       stop everything 'up' started
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gpupool/gpupool/test/localenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gpupool-local:", err)
		os.Exit(1)
	}
}

func usage() error {
	return errors.New("usage: gpupool-local demo|demo-demand|demo-count-demand|up|down|bench [--dir DIR] [--keep] (see docs/local-environment.md)")
}

// commandFlags are the flags that choose what a command does, beside the environment's
// options.
type commandFlags struct {
	keep           bool
	night, timeout time.Duration
	bench          benchConfig
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usage()
	}
	cmd := args[0]
	opts, f, err := parseFlags(cmd, args[1:])
	if err != nil {
		return err
	}
	switch cmd {
	case "up":
		if opts.Dir == "" {
			return errors.New("up needs --dir")
		}
		_, err := localenv.Up(ctx, opts)
		return err
	case "down":
		if opts.Dir == "" {
			return errors.New("down needs --dir")
		}
		if err := localenv.Down(opts); err != nil {
			return err
		}
		fmt.Println("==> stopped everything in", opts.Dir)
		return nil
	case "wire":
		e, err := localenv.Open(opts)
		if err != nil {
			return err
		}
		// The power wire's process also restarts the control-plane components that
		// exit when the API server freezes (see localenv.Supervise).
		go localenv.Supervise(ctx, e)
		return localenv.RunWire(ctx, e)
	case "demo", "demo-demand", "demo-count-demand":
		return runDemo(ctx, cmd, opts, f)
	case "bench":
		return runBench(ctx, opts, f.bench, f.timeout, f.keep)
	}
	return usage()
}

// parseFlags parses a command's flags into the environment's options (paths made
// absolute against --root) and the command's own flags.
func parseFlags(cmd string, args []string) (localenv.Options, commandFlags, error) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	dir := fs.String("dir", "", "state folder: kubeconfig, env.sh, govc.env, pool.yaml, logs (demo, demo-demand, demo-count-demand: a temporary folder when empty)")
	root := fs.String("root", ".", "repository root")
	binDir := fs.String("bin-dir", "bin", "folder with the built binaries")
	image := fs.String("image", "dist/image", "OCI layout of the manager image ('make image') to run the manager from; empty: bin-dir/manager")
	inventory := fs.String("inventory", "", "vgpusim inventory (default test/vgpusim/testdata/daynight.yaml; demo-count-demand: "+localenv.CountInventory+")")
	keep := fs.Bool("keep", false, "demo, demo-demand, demo-count-demand: keep the environment up afterwards (stop it with 'down --dir DIR'); bench: keep each size's state folder (logs, inventory, call counts)")
	night := fs.Duration("night", 2*time.Minute, "demo: how long the night window lasts")
	timeout := fs.Duration("timeout", 10*time.Minute, "demo, demo-demand, demo-count-demand, bench: give up after this long (bench: per size)")
	kueue := fs.Bool("kueue", true, "up, demo: also run Kueue's manager (bin-dir/kueue-<version>, 'make kueue'); the demo queues its training Job through it")
	bench := benchFlags(fs)
	if err := fs.Parse(args); err != nil {
		return localenv.Options{}, commandFlags{}, err
	}
	if *inventory == "" {
		// The count demo needs its two-GPU host; the others run on the day/night sample.
		*inventory = "test/vgpusim/testdata/daynight.yaml"
		if cmd == "demo-count-demand" {
			*inventory = localenv.CountInventory
		}
	}
	f := commandFlags{keep: *keep, night: *night, timeout: *timeout, bench: bench}
	absRoot, err := filepath.Abs(*root)
	if err != nil {
		return localenv.Options{}, f, err
	}
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(absRoot, p)
	}
	opts := localenv.Options{Dir: *dir, Root: absRoot, BinDir: abs(*binDir), Inventory: abs(*inventory), Log: os.Stdout,
		Kueue: *kueue && (cmd == "up" || cmd == "demo")}
	if *image != "" {
		opts.Image = abs(*image)
	}
	if opts.Dir != "" {
		if opts.Dir, err = filepath.Abs(opts.Dir); err != nil {
			return opts, f, err
		}
	}
	return opts, f, nil
}

// runDemo brings the environment up (in a temporary folder without --dir), runs the
// day/night, the demand or the count demand demo on it, and stops it unless --keep.
func runDemo(ctx context.Context, cmd string, opts localenv.Options, f commandFlags) error {
	var err error
	temp := opts.Dir == ""
	if temp {
		if opts.Dir, err = os.MkdirTemp("", "gpupool-demo-"); err != nil {
			return err
		}
	}
	e, err := localenv.Up(ctx, opts)
	if err != nil {
		return err
	}
	var demoErr error
	switch cmd {
	case "demo":
		_, demoErr = localenv.RunDemo(ctx, e, os.Stdout, f.night, f.timeout)
	case "demo-count-demand":
		_, demoErr = localenv.RunCountDemandDemo(ctx, e, os.Stdout, f.timeout)
	default:
		_, demoErr = localenv.RunDemandDemo(ctx, e, os.Stdout, f.timeout)
	}
	if f.keep {
		fmt.Printf("==> environment kept: . %s/env.sh; stop it with: bin/gpupool-local down --dir %s\n", opts.Dir, opts.Dir)
		return demoErr
	}
	downErr := localenv.Down(opts)
	if temp && downErr == nil {
		_ = os.RemoveAll(opts.Dir)
	}
	fmt.Println("==> stopped everything")
	return errors.Join(demoErr, downErr)
}
