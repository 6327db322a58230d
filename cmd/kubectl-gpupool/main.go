// Command kubectl-gpupool sees and steers gpupool pools with Kubernetes credentials only.
// On PATH it is the kubectl plugin `kubectl gpupool`:
//
//	kubectl gpupool status [NAME]             # layout now, wanted, why, next switch, workers
//	kubectl gpupool plan NAME                 # the steps gpupool planned (published in status)
//	kubectl gpupool plan NAME --live          # plan from vCenter directly (needs read access to the credentials Secret)
//	kubectl gpupool switch NAME LAYOUT --for 2h --reason "driver update"
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

	"github.com/go-logr/logr"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func main() {
	// controller-runtime's client logs nothing a user needs; without a logger it warns.
	ctrllog.SetLogger(logr.Discard())
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	if err := newRootCommand(streams).ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
