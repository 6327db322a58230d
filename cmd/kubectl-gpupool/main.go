// Command kubectl-gpupool sees and steers gpupool pools with Kubernetes credentials only.
// On PATH it is the kubectl plugin `kubectl gpupool`:
//
//	kubectl gpupool status [NAME]             # layout now, wanted, why, next switch, workers
//	kubectl gpupool status NAME -w            # and again on every change
//	kubectl gpupool plan NAME                 # the steps gpupool planned (published in status)
//	kubectl gpupool plan NAME --live          # plan from vCenter directly (needs read access to the credentials Secret)
//	kubectl gpupool switch NAME LAYOUT --for 2h --reason "driver update" [--wait]
//	kubectl gpupool resume NAME               # remove the override
//	kubectl gpupool pause NAME / unpause NAME
//	kubectl gpupool history NAME              # past transitions
//	kubectl gpupool timeline NAME --days 7    # which layout is wanted when (also -f pool.yaml)
//	kubectl gpupool version
//
// Every verb but `plan --live` needs only the RBAC of config/rbac/gpupool_viewer_role.yaml
// (reading) and gpupool_editor_role.yaml (switch, resume, pause, unpause).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func main() {
	// controller-runtime's client logs nothing a user needs; without a logger it warns.
	ctrllog.SetLogger(logr.Discard())
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	// An interrupt ends a watch (status -w, switch --wait) through the context.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand(streams).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
