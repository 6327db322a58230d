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
// It exits 0 on success, 3 when the user declined its prompt (nothing changed), and 1 on
// any other error.
//
// Every verb but `plan --live` needs only the RBAC of config/rbac/gpupool_viewer_role.yaml
// (reading) and gpupool_editor_role.yaml (switch, resume, pause, unpause).
package main

import (
	"context"
	"errors"
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
		os.Exit(exitCode(err))
	}
}

// Exit codes: a declined prompt is not a failure, and a script that asks (no --yes)
// can tell the one from the other.
const (
	exitFailed   = 1
	exitDeclined = 3
)

// declinedError is a prompt answered other than yes: nothing changed.
type declinedError struct{ msg string }

func (e *declinedError) Error() string { return e.msg }

func errDeclined(msg string) error { return &declinedError{msg: msg} }

// exitCode is the exit code for a verb's error.
func exitCode(err error) int {
	var declined *declinedError
	if errors.As(err, &declined) {
		return exitDeclined
	}
	return exitFailed
}
